//! [`Utf8Bytes`]: text that shares its buffer with the frame it came in.
//!
//! This is the crate's one use of `unsafe`: handing out `&str` without
//! validating again the bytes that were validated when the value was made.
#![allow(unsafe_code)]

use std::fmt;
use std::ops::Deref;

use bytes::Bytes;

/// Text the caller has just validated (a message decoded in place), as
/// `&str` without a second pass over it.
#[inline]
pub(crate) fn validated_str(bytes: &[u8]) -> &str {
    debug_assert!(std::str::from_utf8(bytes).is_ok());
    // SAFETY: the one caller, `TakenFrame::view` (crate-private), passes a
    // payload that `MessageDecoder::borrow_frame`'s `Utf8Validator`
    // accepted whole (fed and finished) just before: both callers of
    // `view` (`decode_borrowed`, the receive step's borrowed message) hand
    // it the buffer they gave `take_borrowable`, with nothing written to
    // it in between. The decoder's tests compare the text with
    // `std::str::from_utf8`'s.
    unsafe { std::str::from_utf8_unchecked(bytes) }
}

/// Immutable UTF-8 text backed by [`Bytes`]: cloning and slicing share the
/// buffer, and received text reaches you without a copy.
///
/// ```
/// use wavesock_proto::Utf8Bytes;
///
/// let text = Utf8Bytes::from("hello");
/// assert_eq!(text.as_str(), "hello");
/// assert!(Utf8Bytes::try_from(wavesock_proto::Bytes::from_static(b"\xff")).is_err());
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Utf8Bytes(Bytes);

impl Utf8Bytes {
    /// Text from a static string, without copying.
    pub const fn from_static(s: &'static str) -> Self {
        Utf8Bytes(Bytes::from_static(s.as_bytes()))
    }

    /// Wraps bytes the caller has already validated, in this crate only.
    pub(crate) fn from_validated(bytes: Bytes) -> Self {
        debug_assert!(std::str::from_utf8(&bytes).is_ok());
        Utf8Bytes(bytes)
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // SAFETY: every constructor either takes a `str`/`String`, validates
        // with `std::str::from_utf8` (`TryFrom<Bytes>`), or is
        // `from_validated`, whose callers validated the exact bytes with
        // `Utf8Validator` (tests in this module compare both paths), and the
        // inner `Bytes` is never exposed mutably.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }

    /// The underlying bytes.
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }

    /// Gives up the text guarantee and returns the bytes.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Deref for Utf8Bytes {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Utf8Bytes {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<[u8]> for Utf8Bytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Utf8Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Utf8Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl From<String> for Utf8Bytes {
    fn from(s: String) -> Self {
        Utf8Bytes(Bytes::from(s))
    }
}

impl From<&str> for Utf8Bytes {
    fn from(s: &str) -> Self {
        Utf8Bytes(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl TryFrom<Bytes> for Utf8Bytes {
    type Error = std::str::Utf8Error;
    fn try_from(bytes: Bytes) -> Result<Self, Self::Error> {
        std::str::from_utf8(&bytes)?;
        Ok(Utf8Bytes(bytes))
    }
}

impl TryFrom<Vec<u8>> for Utf8Bytes {
    type Error = std::string::FromUtf8Error;
    fn try_from(v: Vec<u8>) -> Result<Self, Self::Error> {
        Ok(String::from_utf8(v)?.into())
    }
}

impl From<Utf8Bytes> for Bytes {
    fn from(t: Utf8Bytes) -> Bytes {
        t.0
    }
}

impl PartialEq<str> for Utf8Bytes {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Utf8Bytes {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::utf8::Utf8Validator;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn unchecked_view_equals_checked_view(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut v = Utf8Validator::new();
            let ok = v.feed(&bytes).and_then(|_| v.finish()).is_ok();
            prop_assert_eq!(ok, std::str::from_utf8(&bytes).is_ok());
            if ok {
                let t = Utf8Bytes::from_validated(Bytes::from(bytes.clone()));
                prop_assert_eq!(t.as_str(), std::str::from_utf8(&bytes).unwrap());
            }
        }
    }

    #[test]
    fn try_from_refuses_invalid() {
        assert!(Utf8Bytes::try_from(Bytes::from_static(&[0xc0, 0xaf])).is_err());
        assert_eq!(
            Utf8Bytes::try_from(Bytes::from_static("é".as_bytes())).unwrap(),
            "é"
        );
    }
}
