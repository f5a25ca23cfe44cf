//! Without the `deflate` feature: compressor types that cannot exist, so the
//! encoder's and decoder's compression paths compile to nothing.

use crate::Role;
use crate::budget::BudgetAccount;
use crate::deflate::{DeflateConfig, DeflateParams};
use crate::error::Error;
use crate::message::Message;
use crate::utf8::Utf8Validator;

/// Whether this build can compress (the `deflate` feature).
pub const AVAILABLE: bool = false;

/// Refuses: compression needs the `deflate` feature.
pub(crate) fn pair(
    _role: Role,
    _params: &DeflateParams,
    _config: &DeflateConfig,
    _max_message_size: usize,
) -> Result<(Inflater, Deflater), Error> {
    Err(Error::InvalidConfig(
        "permessage-deflate needs wavesock's `deflate` feature",
    ))
}

/// A compressor: none can be made without the `deflate` feature.
#[derive(Debug)]
pub enum Deflater {}

impl Deflater {
    pub(crate) fn wants(&self, _len: usize) -> bool {
        match *self {}
    }

    pub(crate) fn compress<R>(
        &mut self,
        _payload: &[u8],
        _write: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, Error> {
        match *self {}
    }

    pub(crate) fn shared_window(&self) -> u8 {
        match *self {}
    }

    pub(crate) fn compress_alone(&self, _payload: &[u8]) -> Result<Vec<u8>, Error> {
        match *self {}
    }

    pub(crate) fn sent_elsewhere(&mut self, _payload: &[u8]) {
        match *self {}
    }

    pub(crate) fn count_in(&mut self, _budget: &crate::budget::MemoryBudget) {
        match *self {}
    }
}

/// What one feed did (see the `deflate` build).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fed {
    pub(crate) consumed: usize,
    pub(crate) wait: Option<usize>,
}

/// A decompressor: none can be made without the `deflate` feature.
#[derive(Debug)]
pub enum Inflater {}

impl Inflater {
    pub(crate) fn in_message(&self) -> bool {
        match *self {}
    }

    pub(crate) fn begin(&mut self, _text: bool) {
        match *self {}
    }

    pub(crate) fn abort(&mut self) {
        match *self {}
    }

    pub(crate) fn holds(&self) -> usize {
        match *self {}
    }

    pub(crate) fn trim(&mut self, _account: &mut BudgetAccount) -> bool {
        match *self {}
    }

    pub(crate) fn feed(
        &mut self,
        _input: &[u8],
        _utf8: &mut Utf8Validator,
        _account: &mut BudgetAccount,
        _beside: usize,
    ) -> Result<Fed, Error> {
        match *self {}
    }

    pub(crate) fn finish(
        &mut self,
        _utf8: &mut Utf8Validator,
        _account: &mut BudgetAccount,
    ) -> Result<Result<Message, usize>, Error> {
        match *self {}
    }
}
