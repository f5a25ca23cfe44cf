//! A compressed message's way through the decoder (permessage-deflate):
//! the inflater taken for it, fed, and given back at its end.

use super::*;

impl MessageDecoder {
    /// Whether a compressed message is being received.
    pub(super) fn inflating(&self) -> bool {
        self.inflater.as_ref().is_some_and(|i| i.in_message())
    }

    /// Checks the RSV bits; starts inflating if the frame begins a
    /// compressed message. RSV1 is allowed only on the first frame of a
    /// data message, and only when permessage-deflate was negotiated.
    pub(super) fn start_compressed(&mut self, header: &FrameHeader) -> Result<bool, Error> {
        if let Some(i) = &mut self.inflater {
            let first = matches!(header.opcode, OpCode::Text | OpCode::Binary);
            let rsv1 = if first { 0b100 } else { 0 };
            header.check(self.role, rsv1, self.accept_unmasked)?;
            if header.rsv & rsv1 != 0 {
                i.begin(header.opcode == OpCode::Text);
                return Ok(true);
            }
            return Ok(false);
        }
        header.check(self.role, 0, self.accept_unmasked)?;
        Ok(false)
    }

    /// Inflates compressed payload bytes as they arrive; returns how many
    /// were taken, and sets `budget_wait` if the budget held it back.
    pub(super) fn inflate(&mut self, fresh: &[u8]) -> Result<usize, Error> {
        let Some(i) = &mut self.inflater else {
            return Ok(fresh.len());
        };
        // The frame is held whole in the read buffer
        // (`frame_held_whole`): its output leaves room for that.
        let beside = match self.state {
            DecodeState::Payload { len, .. } => (len + crate::header::MAX_HEADER_LEN)
                .saturating_sub(self.account.held(Held::ReadBuffer)),
            _ => 0,
        };
        let fed = i.feed(fresh, &mut self.utf8, &mut self.account, beside)?;
        self.inflate_pending = fed.wait.is_some();
        self.budget_wait = fed.wait.and_then(NonZeroUsize::new);
        Ok(fed.consumed)
    }

    /// Ends a compressed message; `None` when it waits for budget.
    pub(super) fn finish_compressed(&mut self) -> Result<Option<Message>, Error> {
        match &mut self.inflater {
            Some(i) => match i.finish(&mut self.utf8, &mut self.account)? {
                Ok(msg) => Ok(Some(msg)),
                Err(wanted) => {
                    self.budget_wait = NonZeroUsize::new(wanted);
                    Ok(None)
                }
            },
            None => Err(ProtocolError::InvalidCompressedData.into()),
        }
    }
}
