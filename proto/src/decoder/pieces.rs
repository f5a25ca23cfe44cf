//! Messages handed out in pieces as their bytes arrive
//! (`stream_messages`), without assembling them.

use super::*;
use crate::message::Frame;

impl MessageDecoder {
    /// Streaming: splits the `avail` checked payload bytes at the front of
    /// `src` off as the next piece of the message, without a copy.
    pub(super) fn piece(&mut self, src: &mut BytesMut, avail: usize) -> Result<Message, Error> {
        let DecodeState::Payload {
            header,
            len,
            checked,
            handed_out,
            ..
        } = &mut self.state
        else {
            unreachable!("called while reading a payload");
        };
        let header = *header;
        let opcode = if *handed_out == 0 {
            header.opcode
        } else {
            OpCode::Continuation
        };
        *handed_out += avail;
        *checked = 0;
        let frame_end = *handed_out == *len;
        let len = *len;
        let payload = take_payload(src, avail).freeze();
        if frame_end {
            self.state = DecodeState::Head;
            if header.fin {
                if self.checking_text {
                    self.utf8.finish()?;
                }
                self.fragments = None;
                self.streamed = 0;
            } else {
                self.streamed += len as u64;
                if header.opcode != OpCode::Continuation {
                    // Marks the message in progress, for the continuation
                    // rules and text checking; nothing is kept in it.
                    self.fragments = Some(Fragments {
                        text: header.opcode == OpCode::Text,
                        buf: BytesMut::new(),
                        owned: true,
                    });
                }
            }
        }
        Ok(Message::Frame(Frame {
            fin: frame_end && header.fin,
            opcode,
            payload,
        }))
    }
}
