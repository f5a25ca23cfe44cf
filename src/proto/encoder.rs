//! Frame encoding, with fresh masking keys for clients.

use bytes::{BufMut, BytesMut};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::error::Error;
use crate::proto::Role;
use crate::proto::close::CloseFrame;
use crate::proto::header::{FrameHeader, MAX_CONTROL_PAYLOAD, MAX_HEADER_LEN, OpCode};
use crate::proto::mask::apply_mask;
use crate::proto::message::{Frame, Message, PreparedMessage};

/// Writes frames for one side of a connection. A client's encoder draws a
/// fresh masking key per frame from a fast generator seeded from the OS.
#[derive(Debug)]
pub struct FrameEncoder {
    role: Role,
    // Boxed: servers never need it, and every connection should be small.
    rng: Option<Box<SmallRng>>,
    /// Compresses data messages when permessage-deflate was negotiated.
    #[cfg(feature = "deflate")]
    // Boxed: a connection without compression pays one pointer for it.
    deflater: Option<Box<crate::proto::deflate::Deflater>>,
}

/// RSV1: "this message is compressed" under permessage-deflate.
#[cfg(feature = "deflate")]
const RSV1: u8 = 0b100;

impl FrameEncoder {
    /// An encoder for `role` (the side that writes).
    pub fn new(role: Role) -> Self {
        FrameEncoder {
            role,
            rng: None,
            #[cfg(feature = "deflate")]
            deflater: None,
        }
    }

    /// Compresses text and binary messages from now on (permessage-deflate).
    #[cfg(feature = "deflate")]
    pub(crate) fn set_deflater(&mut self, deflater: crate::proto::deflate::Deflater) {
        self.deflater = Some(Box::new(deflater));
    }

    /// Whether [`encode_message`](Self::encode_message) compresses `msg`.
    /// Raw [`Frame`]s never are.
    pub fn compresses(&self, msg: &Message) -> bool {
        #[cfg(feature = "deflate")]
        if let Some(d) = &self.deflater {
            return msg.is_data() && d.wants(msg.len());
        }
        let _ = msg;
        false
    }

    /// A whole text or binary message as one frame, compressed if
    /// negotiated and large enough.
    fn encode_data(
        &mut self,
        opcode: OpCode,
        payload: &[u8],
        dst: &mut BytesMut,
    ) -> Result<(), Error> {
        #[cfg(feature = "deflate")]
        if let Some(mut d) = self.deflater.take() {
            let r = if d.wants(payload.len()) {
                d.compress(payload, |c| self.write_frame(true, RSV1, opcode, c, dst))
                    .and_then(|r| r)
            } else {
                self.write_frame(true, 0, opcode, payload, dst)
            };
            self.deflater = Some(d);
            return r;
        }
        self.write_frame(true, 0, opcode, payload, dst)
    }

    /// Which side this encoder writes for.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Encodes one frame into `dst`, masking it if this side is a client.
    pub fn encode_frame(
        &mut self,
        fin: bool,
        opcode: OpCode,
        payload: &[u8],
        dst: &mut BytesMut,
    ) -> Result<(), Error> {
        self.write_frame(fin, 0, opcode, payload, dst)
    }

    fn write_frame(
        &mut self,
        fin: bool,
        rsv: u8,
        opcode: OpCode,
        payload: &[u8],
        dst: &mut BytesMut,
    ) -> Result<(), Error> {
        dst.reserve(MAX_HEADER_LEN + payload.len());
        let mask = self.write_header(fin, rsv, opcode, payload.len(), dst)?;
        let start = dst.len();
        dst.put_slice(payload);
        if let Some(key) = mask {
            apply_mask(&mut dst[start..], key, 0);
        }
        Ok(())
    }

    /// Writes only the header of a frame with `len` payload bytes, and returns the masking key the payload must be
    /// masked with, if this side is a client. A server can then send the
    /// payload from where it already is, without copying it.
    pub fn encode_header(
        &mut self,
        fin: bool,
        opcode: OpCode,
        len: usize,
        dst: &mut BytesMut,
    ) -> Result<Option<[u8; 4]>, Error> {
        self.write_header(fin, 0, opcode, len, dst)
    }

    fn write_header(
        &mut self,
        fin: bool,
        rsv: u8,
        opcode: OpCode,
        len: usize,
        dst: &mut BytesMut,
    ) -> Result<Option<[u8; 4]>, Error> {
        if opcode.is_control() {
            if !fin {
                return Err(Error::InvalidMessage("control frames cannot be fragmented"));
            }
            if len as u64 > MAX_CONTROL_PAYLOAD {
                return Err(Error::InvalidMessage(
                    "control frame payload over 125 bytes",
                ));
            }
        }
        let mask = match self.role {
            Role::Server => None,
            Role::Client => Some(
                self.rng
                    .get_or_insert_with(|| Box::new(SmallRng::from_os_rng()))
                    .random::<[u8; 4]>(),
            ),
        };
        let header = FrameHeader {
            fin,
            rsv,
            opcode,
            mask,
            payload_len: len as u64,
        };
        let mut head = [0u8; MAX_HEADER_LEN];
        let n = header.encode(&mut head);
        dst.put_slice(&head[..n]);
        Ok(mask)
    }

    /// Encodes a prepared message into `dst`: its frame as it is for a
    /// server, masked anew for a client.
    pub fn encode_prepared(
        &mut self,
        p: &PreparedMessage,
        dst: &mut BytesMut,
    ) -> Result<(), Error> {
        match self.role {
            Role::Server => {
                dst.extend_from_slice(&p.frame);
                Ok(())
            }
            Role::Client => self.encode_frame(true, p.opcode, &p.payload, dst),
        }
    }

    /// Encodes a whole message as one frame into `dst`.
    pub fn encode_message(&mut self, msg: &Message, dst: &mut BytesMut) -> Result<(), Error> {
        match msg {
            Message::Text(t) => self.encode_data(OpCode::Text, t.as_bytes(), dst),
            Message::Binary(b) => self.encode_data(OpCode::Binary, b, dst),
            Message::Ping(b) => self.encode_frame(true, OpCode::Ping, b, dst),
            Message::Pong(b) => self.encode_frame(true, OpCode::Pong, b, dst),
            Message::Close(f) => {
                let payload = CloseFrame::encode(f.as_ref())?;
                self.encode_frame(true, OpCode::Close, &payload, dst)
            }
            Message::Frame(Frame {
                fin,
                opcode,
                payload,
            }) => self.encode_frame(*fin, *opcode, payload, dst),
        }
    }
}
