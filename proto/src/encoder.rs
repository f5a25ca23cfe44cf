//! Frame encoding, with fresh masking keys for clients.

use bytes::{BufMut, Bytes, BytesMut};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::Role;
use crate::close::CloseFrame;
use crate::deflate::Deflater;
use crate::error::Error;
use crate::header::{FrameHeader, MAX_HEADER_LEN, OpCode};
use crate::mask::{MaskKeys, apply_mask};
use crate::message::{Frame, Message, PreparedMessage};

/// Writes frames for one side of a connection. A client's encoder draws a
/// fresh masking key per frame from a fast generator seeded from the OS, or,
/// in tests, keys chosen with [`MaskKeys`].
#[derive(Debug)]
pub struct FrameEncoder {
    role: Role,
    // Boxed: servers never need it, and every connection should be small.
    // `None` on a client: random keys, the generator not seeded yet.
    keys: Option<Box<KeySource>>,
    /// Compresses data messages when permessage-deflate was negotiated.
    // Boxed: a connection without compression pays one pointer for it.
    deflater: Option<Box<Deflater>>,
}

/// A client's masking keys as it draws them.
#[derive(Debug)]
enum KeySource {
    Random(SmallRng),
    Fixed([u8; 4]),
    /// The key of the next frame.
    Counting(u32),
}

impl KeySource {
    #[inline]
    fn next_key(&mut self) -> [u8; 4] {
        match self {
            KeySource::Random(rng) => rng.random(),
            KeySource::Fixed(key) => *key,
            KeySource::Counting(next) => {
                let key = next.to_be_bytes();
                *next = next.wrapping_add(1);
                key
            }
        }
    }
}

/// RSV1: "this message is compressed" under permessage-deflate.
const RSV1: u8 = 0b100;

/// Unmasked payloads at least this large are written from where they are
/// (after their header, by a vectored write) rather than copied next to it:
/// below it, a copy costs less than another slice to write.
pub const SHARE_PAYLOAD_MIN: usize = 4 << 10;

impl FrameEncoder {
    /// An encoder for `role` (the side that writes), masking with random
    /// keys if it is a client.
    ///
    /// ```
    /// // Needs bytes.
    /// use bytes::BytesMut;
    /// use wavesock_proto::encoder::FrameEncoder;
    /// use wavesock_proto::{OpCode, Role};
    ///
    /// let mut wire = BytesMut::new();
    /// FrameEncoder::new(Role::Server).encode_frame(true, OpCode::Text, b"hi", &mut wire)?;
    /// assert_eq!(wire[..], [0x81, 0x02, b'h', b'i']);
    /// # Ok::<(), wavesock_proto::Error>(())
    /// ```
    #[inline]
    pub fn new(role: Role) -> Self {
        Self::with_mask_keys(role, MaskKeys::Random)
    }

    /// An encoder for `role` that masks, if it is a client, with the keys
    /// `keys` says. Anything but [`MaskKeys::Random`] is for tests only:
    /// see [`MaskKeys`] for what it gives up.
    ///
    /// ```
    /// // Needs bytes.
    /// use bytes::BytesMut;
    /// use wavesock_proto::encoder::FrameEncoder;
    /// use wavesock_proto::{MaskKeys, OpCode, Role};
    ///
    /// let keys = MaskKeys::FixedForTesting([0; 4]);
    /// let mut encoder = FrameEncoder::with_mask_keys(Role::Client, keys);
    /// let mut wire = BytesMut::new();
    /// encoder.encode_frame(true, OpCode::Text, b"hi", &mut wire)?;
    /// // The mask bit, a zero key, and the payload as it was.
    /// assert_eq!(wire[..], [0x81, 0x82, 0, 0, 0, 0, b'h', b'i']);
    /// # Ok::<(), wavesock_proto::Error>(())
    /// ```
    #[inline]
    pub fn with_mask_keys(role: Role, keys: MaskKeys) -> Self {
        let keys = match (role, keys) {
            (Role::Server, _) | (Role::Client, MaskKeys::Random) => None,
            (Role::Client, MaskKeys::FixedForTesting(key)) => Some(KeySource::Fixed(key)),
            (Role::Client, MaskKeys::CountingForTesting(first)) => Some(KeySource::Counting(first)),
        };
        FrameEncoder {
            role,
            keys: keys.map(Box::new),
            deflater: None,
        }
    }

    /// Compresses text and binary messages from now on (permessage-deflate),
    /// with `deflater` (from [`deflate::pair`](crate::deflate::pair)).
    pub fn set_deflater(&mut self, deflater: Deflater) {
        self.deflater = Some(Box::new(deflater));
    }

    /// Whether [`encode_message`](Self::encode_message) compresses `msg`.
    /// Raw [`Frame`]s never are.
    pub fn compresses(&self, msg: &Message) -> bool {
        self.deflater
            .as_ref()
            .is_some_and(|d| msg.is_data() && d.wants(msg.len()))
    }

    /// Whether a text or binary message of `len` bytes is compressed.
    pub fn compresses_len(&self, len: usize) -> bool {
        self.deflater.as_ref().is_some_and(|d| d.wants(len))
    }

    /// A whole text or binary message as one frame, compressed if
    /// negotiated and large enough.
    /// Encodes a whole text or binary message from a borrowed payload as
    /// one frame into `dst`: compressed when permessage-deflate is on and
    /// the message is large enough, masked if this side is a client. For
    /// engines that hand out borrowed messages and take borrowed replies.
    #[inline]
    pub fn encode_data(
        &mut self,
        opcode: OpCode,
        payload: &[u8],
        dst: &mut BytesMut,
    ) -> Result<(), Error> {
        if let Some(mut d) = self.deflater.take() {
            let r = if d.wants(payload.len()) {
                match d.compress(payload, |c| self.write_frame(true, RSV1, opcode, c, dst)) {
                    Ok(Some(written)) => written,
                    // No memory for the compressor now: uncompressed.
                    Ok(None) => self.write_frame(true, 0, opcode, payload, dst),
                    Err(e) => Err(e),
                }
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
        if self.role == Role::Server && payload.len() <= 125 && (fin || !opcode.is_control()) {
            // A server's small frame, the usual reply: two bytes of header
            // and the payload, with nothing to check or mask.
            dst.reserve(2 + payload.len());
            let first = (u8::from(fin) << 7) | ((rsv & 0x07) << 4) | opcode.as_u8();
            dst.put_slice(&[first, payload.len() as u8]);
            dst.put_slice(payload);
            return Ok(());
        }
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
    #[inline]
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
        let mut header = FrameHeader {
            fin,
            rsv,
            opcode,
            mask: None,
            payload_len: len as u64,
        };
        header.check_outgoing()?;
        if self.role == Role::Client {
            header.mask = Some(
                self.keys
                    .get_or_insert_with(|| Box::new(KeySource::Random(SmallRng::from_os_rng())))
                    .next_key(),
            );
        }
        if header.mask.is_none() && len <= 125 {
            // A server's small frame, the usual reply: two bytes, copied
            // as such (the general case's copy of a length known only at
            // run time is a call to `memcpy`).
            dst.put_slice(&[header.first_byte(), len as u8]);
            return Ok(None);
        }
        let mut head = [0u8; MAX_HEADER_LEN];
        let n = header.encode(&mut head);
        dst.put_slice(&head[..n]);
        Ok(header.mask)
    }

    /// Encodes `msg` for a writer that can send bytes from where they are.
    /// Returns `None` when the whole frame went into `dst`; or, when the
    /// payload goes on the wire as it is (a server's, uncompressed, of at
    /// least [`SHARE_PAYLOAD_MIN`] bytes), writes only the header into
    /// `dst` and returns the payload, to be written right after it.
    ///
    /// ```
    /// // Needs bytes.
    /// use bytes::BytesMut;
    /// use wavesock_proto::encoder::{FrameEncoder, SHARE_PAYLOAD_MIN};
    /// use wavesock_proto::{Message, Role};
    ///
    /// let big = Message::binary(vec![7; SHARE_PAYLOAD_MIN]);
    /// let mut head = BytesMut::new();
    /// let payload = FrameEncoder::new(Role::Server).encode_owned(big.clone(), &mut head)?;
    /// assert_eq!(head.len(), 4, "the header alone");
    /// assert_eq!(payload.unwrap().len(), SHARE_PAYLOAD_MIN);
    /// // A client masks every payload: nothing goes out as it was.
    /// let mut frame = BytesMut::new();
    /// assert!(FrameEncoder::new(Role::Client).encode_owned(big, &mut frame)?.is_none());
    /// # Ok::<(), wavesock_proto::Error>(())
    /// ```
    #[inline]
    pub fn encode_owned(
        &mut self,
        msg: Message,
        dst: &mut BytesMut,
    ) -> Result<Option<Bytes>, Error> {
        if self.deflater.is_none() && self.role == Role::Server {
            // No compression: a data message goes out as it is, its
            // payload copied when small and shared when large.
            let small: Option<(OpCode, &[u8])> = match &msg {
                Message::Text(t) => Some((OpCode::Text, &t.as_bytes()[..])),
                Message::Binary(b) => Some((OpCode::Binary, &b[..])),
                _ => None,
            };
            if let Some((opcode, payload)) = small.filter(|(_, p)| p.len() < SHARE_PAYLOAD_MIN) {
                return self
                    .write_frame(true, 0, opcode, payload, dst)
                    .map(|()| None);
            }
        }
        self.encode_owned_other(msg, dst)
    }

    fn encode_owned_other(
        &mut self,
        msg: Message,
        dst: &mut BytesMut,
    ) -> Result<Option<Bytes>, Error> {
        if self.role == Role::Client || msg.len() < SHARE_PAYLOAD_MIN || self.compresses(&msg) {
            return self.encode_message(&msg, dst).map(|()| None);
        }
        let (fin, opcode, payload) = match msg {
            Message::Text(t) => (true, OpCode::Text, t.into_bytes()),
            Message::Binary(b) => (true, OpCode::Binary, b),
            Message::Frame(f) => (f.fin, f.opcode, f.payload),
            // Control frames are small: under the threshold above.
            other => return self.encode_message(&other, dst).map(|()| None),
        };
        self.write_header(fin, 0, opcode, payload.len(), dst)?;
        Ok(Some(payload))
    }

    /// The frame to send for `p` as it is, shared with every connection
    /// that sends it alike; `None` when this side must encode it itself
    /// ([`encode_prepared`](Self::encode_prepared)): a client masks each
    /// frame with a key of its own.
    pub fn shared_frame(&mut self, p: &PreparedMessage) -> Result<Option<Bytes>, Error> {
        match self.role {
            Role::Server => self.prepared_frame(p).map(Some),
            Role::Client => Ok(None),
        }
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
                let frame = self.prepared_frame(p)?;
                dst.extend_from_slice(&frame);
                Ok(())
            }
            Role::Client if matches!(p.opcode, OpCode::Text | OpCode::Binary) => {
                self.encode_data(p.opcode, &p.payload, dst)
            }
            Role::Client => self.encode_frame(true, p.opcode, &p.payload, dst),
        }
    }

    /// The frame a server sends for `p`, shared with every connection that
    /// sends it alike: compressed (once per window size) when this
    /// connection compresses a message of its size, as it is otherwise.
    /// For a server's encoder only (a client masks each frame anew).
    pub fn prepared_frame(&mut self, p: &PreparedMessage) -> Result<Bytes, Error> {
        debug_assert_eq!(self.role, Role::Server, "client frames are masked each");
        let Some(d) = self.deflater.as_deref_mut() else {
            return Ok(p.frame.clone());
        };
        if !d.wants(p.payload.len()) {
            return Ok(p.frame.clone());
        }
        let compress = |payload: &[u8]| {
            let compressed = d.compress_alone(payload)?;
            let mut frame = BytesMut::new();
            FrameEncoder::new(Role::Server).write_frame(
                true,
                RSV1,
                p.opcode,
                &compressed,
                &mut frame,
            )?;
            Ok(frame.freeze())
        };
        match p.compressed_frame(d.shared_window(), compress) {
            Some(frame) => {
                let frame = frame?;
                d.sent_elsewhere(&p.payload);
                Ok(frame)
            }
            None => Ok(p.frame.clone()),
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

// The deflate module sits below the encoder, which holds its Deflater, so it
// cannot name the encoder without the two depending on each other: the
// encoder says here what `deflate::enable` needs of it.
impl crate::deflate::sealed::Sealed for FrameEncoder {}

impl crate::deflate::TakesDeflater for FrameEncoder {
    fn set_deflater(&mut self, deflater: Deflater) {
        FrameEncoder::set_deflater(self, deflater);
    }
}

#[cfg(test)]
#[path = "encoder_tests.rs"]
mod tests;
