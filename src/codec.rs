//! The `tokio_util::codec` glue: a [`Decoder`] that turns a byte buffer into
//! [`Message`]s and an [`Encoder`] that turns messages into frames, over the
//! sans-IO [`MessageDecoder`] and [`FrameEncoder`].

use bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder};

use crate::config::Config;
use crate::error::Error;
use crate::proto::Role;
use crate::proto::decoder::MessageDecoder;
#[cfg(feature = "deflate")]
use crate::proto::deflate::{DeflateConfig, DeflateParams};
use crate::proto::encoder::FrameEncoder;
use crate::proto::header::OpCode;
use crate::proto::message::{Message, PreparedMessage};

/// Encodes and decodes WebSocket frames for one side of a connection.
///
/// Use it directly with [`tokio_util::codec::Framed`] if you want frames over
/// your own I/O loop; [`WebSocketStream`](crate::WebSocketStream) wraps it
/// with automatic pongs, the close handshake and write coalescing.
///
/// ```
/// // Needs bytes, tokio-util.
/// use bytes::BytesMut;
/// use tokio_util::codec::Decoder;
/// use wavesock::{Config, Message, Role, WebSocketCodec};
///
/// let mut codec = WebSocketCodec::new(Role::Client, &Config::default());
/// let mut buf = BytesMut::from(&[0x81, 0x05, b'H', b'e', b'l', b'l', b'o'][..]);
/// assert_eq!(codec.decode(&mut buf).unwrap(), Some(Message::text("Hello")));
/// ```
#[derive(Debug)]
pub struct WebSocketCodec {
    decoder: MessageDecoder,
    encoder: FrameEncoder,
}

impl WebSocketCodec {
    /// A codec for `role` with the limits (and, for a client, the
    /// [`mask_keys`](Config::mask_keys)) of `config`.
    pub fn new(role: Role, config: &Config) -> Self {
        WebSocketCodec {
            decoder: decoder(role, config),
            encoder: FrameEncoder::with_mask_keys(role, config.mask_keys),
        }
    }

    /// Which side this codec speaks for.
    pub fn role(&self) -> Role {
        self.decoder.role()
    }

    /// How many more bytes the frame being read needs, if a payload is being
    /// read; the caller can size its next read with it.
    pub fn payload_remaining(&self, buffered: usize) -> Option<usize> {
        self.decoder.payload_remaining(buffered)
    }

    /// Whether encoding `msg` compresses it (permessage-deflate was
    /// negotiated and the message is large enough), so that its payload
    /// cannot be sent from where it is.
    pub fn compresses(&self, msg: &Message) -> bool {
        self.encoder.compresses(msg)
    }

    /// Turns permessage-deflate on in both directions, with the parameters
    /// the handshake agreed on. An error (the core could not make the
    /// compressor pair for these parameters) leaves the codec as it was;
    /// the connection should then be refused or failed, as both engines do.
    #[cfg(feature = "deflate")]
    pub fn enable_deflate(
        &mut self,
        params: &DeflateParams,
        config: &DeflateConfig,
    ) -> Result<(), Error> {
        crate::proto::deflate::enable(&mut self.decoder, &mut self.encoder, params, config)?;
        Ok(())
    }

    /// Writes only a frame header; see [`FrameEncoder::encode_header`].
    pub fn encode_header(
        &mut self,
        fin: bool,
        opcode: OpCode,
        len: usize,
        dst: &mut BytesMut,
    ) -> Result<Option<[u8; 4]>, Error> {
        Ok(self.encoder.encode_header(fin, opcode, len, dst)?)
    }

    /// Encodes one frame into `dst`, masking it if this side is a client.
    pub fn encode_frame(
        &mut self,
        fin: bool,
        opcode: OpCode,
        payload: &[u8],
        dst: &mut BytesMut,
    ) -> Result<(), Error> {
        Ok(self.encoder.encode_frame(fin, opcode, payload, dst)?)
    }
}

/// The protocol core's decoder with what `config` says of decoding.
pub(crate) fn decoder(role: Role, config: &Config) -> MessageDecoder {
    MessageDecoder::new(role, config.limits())
        .accept_unmasked_frames(config.accept_unmasked_frames)
        .stream_messages(config.stream_messages)
}

impl Decoder for WebSocketCodec {
    type Item = Message;
    type Error = Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Message>, Error> {
        Ok(self.decoder.decode(src)?)
    }
}

impl Encoder<Message> for WebSocketCodec {
    type Error = Error;

    fn encode(&mut self, msg: Message, dst: &mut BytesMut) -> Result<(), Error> {
        Ok(self.encoder.encode_message(&msg, dst)?)
    }
}

impl Encoder<&Message> for WebSocketCodec {
    type Error = Error;

    fn encode(&mut self, msg: &Message, dst: &mut BytesMut) -> Result<(), Error> {
        Ok(self.encoder.encode_message(msg, dst)?)
    }
}

/// A [`PreparedMessage`]: for a server its frame as encoded once, for a
/// client masked anew.
impl Encoder<&PreparedMessage> for WebSocketCodec {
    type Error = Error;

    fn encode(&mut self, msg: &PreparedMessage, dst: &mut BytesMut) -> Result<(), Error> {
        Ok(self.encoder.encode_prepared(msg, dst)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ProtocolError;
    use crate::proto::close::CloseCode;
    use crate::proto::close::CloseFrame;
    use crate::proto::mask::apply_mask;
    use crate::proto::message::Frame;
    use bytes::Bytes;
    use proptest::prelude::*;

    /// How the input reaches the decoder.
    #[derive(Debug, Clone)]
    enum Feed {
        Whole,
        ByteByByte,
        Chunks(Vec<usize>),
    }

    /// Decodes everything `input` holds, fed as `feed` says, stopping at the
    /// first error (as a connection would).
    fn decode_with(
        codec: &mut WebSocketCodec,
        input: &[u8],
        feed: &Feed,
    ) -> Vec<Result<Message, String>> {
        let sizes: Vec<usize> = match feed {
            Feed::Whole => vec![input.len()],
            Feed::ByteByByte => vec![1; input.len()],
            Feed::Chunks(c) => c.clone(),
        };
        let mut out = Vec::new();
        let mut buf = BytesMut::new();
        let mut at = 0;
        let mut sizes = sizes.into_iter().cycle();
        while at < input.len() {
            let n = sizes.next().unwrap_or(1).max(1).min(input.len() - at);
            buf.extend_from_slice(&input[at..at + n]);
            at += n;
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(m)) => out.push(Ok(m)),
                    Ok(None) => break,
                    Err(e) => {
                        out.push(Err(e.to_string()));
                        return out;
                    }
                }
            }
        }
        out
    }

    fn all_feeds(role: Role, config: &Config, input: &[u8]) -> Vec<Result<Message, String>> {
        let feeds = [
            Feed::Whole,
            Feed::ByteByByte,
            Feed::Chunks(vec![3, 1, 7, 2, 64, 5]),
            Feed::Chunks(vec![13, 2]),
        ];
        let mut results = feeds.iter().map(|f| {
            let mut codec = WebSocketCodec::new(role, config);
            decode_with(&mut codec, input, f)
        });
        let first = results.next().unwrap();
        for (i, r) in results.enumerate() {
            assert_eq!(first, r, "feed {:?} disagrees with whole", feeds[i + 1]);
        }
        first
    }

    fn client_decodes(input: &[u8]) -> Vec<Result<Message, String>> {
        all_feeds(Role::Client, &Config::default(), input)
    }

    fn server_decodes(input: &[u8]) -> Vec<Result<Message, String>> {
        all_feeds(Role::Server, &Config::default(), input)
    }

    /// A frame as a client would send it (masked with a fixed key).
    fn masked(b0: u8, payload: &[u8]) -> Vec<u8> {
        let key = [0x37, 0xfa, 0x21, 0x3d];
        let mut out = vec![b0];
        match payload.len() {
            n @ 0..=125 => out.push(0x80 | n as u8),
            n @ 126..=0xFFFF => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&key);
        let start = out.len();
        out.extend_from_slice(payload);
        apply_mask(&mut out[start..], key, 0);
        out
    }

    #[test]
    fn rfc_unmasked_hello() {
        assert_eq!(
            client_decodes(&[0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f]),
            vec![Ok(Message::text("Hello"))]
        );
    }

    #[test]
    fn rfc_masked_hello() {
        let input = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        assert_eq!(server_decodes(&input), vec![Ok(Message::text("Hello"))]);
    }

    #[test]
    fn rfc_fragmented_hello() {
        let input = [0x01, 0x03, 0x48, 0x65, 0x6c, 0x80, 0x02, 0x6c, 0x6f];
        assert_eq!(client_decodes(&input), vec![Ok(Message::text("Hello"))]);
    }

    #[test]
    fn rfc_ping_and_pong() {
        let mut input = vec![0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
        input.extend_from_slice(&[0x8a, 0x00]);
        assert_eq!(
            client_decodes(&input),
            vec![
                Ok(Message::Ping(Bytes::from_static(b"Hello"))),
                Ok(Message::Pong(Bytes::new()))
            ]
        );
    }

    #[test]
    fn rfc_256_and_64k_binary() {
        let a = vec![0xAB; 256];
        let b = vec![0xCD; 65536];
        let mut input = vec![0x82, 0x7E, 0x01, 0x00];
        input.extend_from_slice(&a);
        input.extend_from_slice(&[0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0]);
        input.extend_from_slice(&b);
        let mut codec = WebSocketCodec::new(Role::Client, &Config::default());
        for feed in [Feed::Whole, Feed::Chunks(vec![1000, 7])] {
            assert_eq!(
                decode_with(&mut codec, &input, &feed),
                vec![
                    Ok(Message::binary(a.clone())),
                    Ok(Message::binary(b.clone()))
                ]
            );
        }
    }

    #[test]
    fn control_frames_between_fragments() {
        let mut input = masked(0x01, b"He");
        input.extend(masked(0x89, b"p"));
        input.extend(masked(0x00, b"l"));
        input.extend(masked(0x8A, b""));
        input.extend(masked(0x80, b"lo"));
        assert_eq!(
            server_decodes(&input),
            vec![
                Ok(Message::Ping(Bytes::from_static(b"p"))),
                Ok(Message::Pong(Bytes::new())),
                Ok(Message::text("Hello")),
            ]
        );
    }

    #[test]
    fn close_frames_are_parsed() {
        let mut payload = 1000u16.to_be_bytes().to_vec();
        payload.extend_from_slice(b"bye");
        assert_eq!(
            server_decodes(&masked(0x88, &payload)),
            vec![Ok(Message::Close(Some(CloseFrame::new(
                CloseCode::NORMAL,
                "bye"
            ))))]
        );
        assert_eq!(
            server_decodes(&masked(0x88, b"")),
            vec![Ok(Message::Close(None))]
        );
    }

    fn decode_error(role: Role, config: &Config, input: &[u8]) -> Error {
        // The same error whatever the read boundaries (asserted inside).
        let fed = all_feeds(role, config, input);
        assert!(matches!(fed.last(), Some(Err(_))), "{fed:?}");
        let mut codec = WebSocketCodec::new(role, config);
        let mut buf = BytesMut::from(input);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("no error for {input:x?}"),
                Err(e) => return e,
            }
        }
    }

    #[test]
    fn violations_map_to_close_codes() {
        let cfg = Config::default();
        let cases: Vec<(Vec<u8>, u16)> = vec![
            (vec![0x82, 0x00], 1002),   // unmasked from client
            (masked(0xC2, b""), 1002),  // RSV1
            (masked(0x83, b""), 1002),  // reserved opcode
            (masked(0x09, b""), 1002),  // fragmented ping
            (masked(0x80, b"x"), 1002), // stray continuation
            ([masked(0x01, b"a"), masked(0x81, b"b")].concat(), 1002), // new message mid-fragment
            (masked(0x88, &[0x03]), 1002), // one-byte close
            (masked(0x88, &[0x03, 0xED]), 1002), // close code 1005
            (masked(0x88, &[0x03, 0xE8, 0xFF]), 1007), // bad close reason
            (masked(0x81, &[0xCE, 0xBA, 0xFF]), 1007), // bad text
            (
                [masked(0x01, &[0xF0, 0x9F]), masked(0x80, b"")].concat(),
                1007,
            ), // truncated code point
        ];
        for (input, code) in cases {
            let e = decode_error(Role::Server, &cfg, &input);
            assert_eq!(e.close_code(), Some(CloseCode(code)), "{input:x?}: {e}");
        }
        let e = decode_error(Role::Client, &cfg, &masked(0x82, b"x"));
        assert!(matches!(e, Error::Protocol(ProtocolError::MaskedFrame)));
    }

    #[test]
    fn invalid_text_fails_before_the_frame_ends() {
        // Autobahn 6.4.x: the invalid bytes arrive, the rest of the frame
        // does not (yet). ED A0 starts a UTF-16 surrogate, never valid.
        let mut payload = "κόσμε".as_bytes().to_vec();
        payload.extend_from_slice(&[0xED, 0xA0, 0x80]);
        payload.extend_from_slice(b"edited");
        let frame = masked(0x81, &payload);
        let header_len = 6;
        let cut = header_len + "κόσμε".len() + 2;
        let mut codec = WebSocketCodec::new(Role::Server, &Config::default());
        let mut buf = BytesMut::from(&frame[..cut]);
        assert!(matches!(codec.decode(&mut buf), Err(Error::InvalidUtf8)));
        // One byte earlier the prefix is still possible.
        let mut codec = WebSocketCodec::new(Role::Server, &Config::default());
        let mut buf = BytesMut::from(&frame[..cut - 1]);
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
    }

    #[test]
    fn frame_limit_is_checked_on_the_header() {
        let cfg = Config::default()
            .max_frame_size(1000)
            .max_message_size(1500);
        let mut codec = WebSocketCodec::new(Role::Client, &cfg);
        // A 2^63 - 1 byte frame: refused from ten header bytes.
        let mut buf =
            BytesMut::from(&[0x82, 0x7F, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF][..]);
        let cap = buf.capacity();
        assert!(
            matches!(codec.decode(&mut buf), Err(Error::FrameTooLarge { size, max: 1000 }) if size == (1 << 63) - 1)
        );
        assert_eq!(buf.capacity(), cap, "no memory reserved for the payload");
    }

    #[test]
    fn message_limit_counts_all_fragments() {
        let cfg = Config::default()
            .max_frame_size(1000)
            .max_message_size(1500);
        let mut input = masked(0x02, &[0; 1000]);
        input.extend(masked(0x80, &[0; 501]));
        let e = decode_error(Role::Server, &cfg, &input);
        assert!(
            matches!(
                e,
                Error::MessageTooLarge {
                    size: 1501,
                    max: 1500
                }
            ),
            "{e}"
        );
        assert_eq!(e.close_code(), Some(CloseCode::MESSAGE_TOO_BIG));
        // Exactly at the limit passes.
        let mut input = masked(0x02, &[0; 1000]);
        input.extend(masked(0x80, &[0; 500]));
        assert_eq!(all_feeds(Role::Server, &cfg, &input).len(), 1);
    }

    #[test]
    fn decoder_never_reserves_for_announced_payload() {
        // 32 MiB announced, 1 KiB sent: the buffer holds what arrived.
        let mut codec = WebSocketCodec::new(
            Role::Client,
            &Config::default()
                .max_frame_size(64 << 20)
                .max_message_size(64 << 20),
        );
        let mut buf = BytesMut::with_capacity(2048);
        buf.extend_from_slice(&[0x82, 0x7F, 0, 0, 0, 0, 0x02, 0, 0, 0]);
        buf.extend_from_slice(&[7u8; 1024]);
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
        assert!(buf.capacity() <= 2048);
        assert_eq!(codec.payload_remaining(buf.len()), Some((32 << 20) - 1024));
    }

    #[test]
    fn single_frame_payload_is_not_copied() {
        let mut codec = WebSocketCodec::new(Role::Client, &Config::default());
        let mut buf = BytesMut::from(&[0x82, 0x03, 1, 2, 3][..]);
        let base = buf.as_ptr() as usize;
        let Some(Message::Binary(b)) = codec.decode(&mut buf).unwrap() else {
            panic!()
        };
        assert_eq!(
            b.as_ptr() as usize,
            base + 2,
            "payload shares the read buffer"
        );
    }

    #[test]
    fn client_masks_and_server_does_not() {
        let mut client = WebSocketCodec::new(Role::Client, &Config::default());
        let mut server = WebSocketCodec::new(Role::Server, &Config::default());
        let mut c = BytesMut::new();
        let mut s = BytesMut::new();
        client.encode(Message::text("Hello"), &mut c).unwrap();
        server.encode(Message::text("Hello"), &mut s).unwrap();
        assert_eq!(&s[..], &[0x81, 0x05, b'H', b'e', b'l', b'l', b'o']);
        assert_eq!(c[1], 0x85);
        assert_eq!(c.len(), 11);
        // Two frames get different keys.
        let mut c2 = BytesMut::new();
        client.encode(Message::text("Hello"), &mut c2).unwrap();
        assert_ne!(c[2..6], c2[2..6]);
        assert_eq!(server.decode(&mut c).unwrap(), Some(Message::text("Hello")));
    }

    #[test]
    fn unsendable_messages_are_refused() {
        let mut codec = WebSocketCodec::new(Role::Server, &Config::default());
        let mut out = BytesMut::new();
        assert!(
            codec
                .encode(Message::Ping(vec![0; 126].into()), &mut out)
                .is_err()
        );
        assert!(
            codec
                .encode(
                    Message::Close(Some(CloseFrame::new(CloseCode::ABNORMAL, ""))),
                    &mut out
                )
                .is_err()
        );
        assert!(
            codec
                .encode(
                    Message::Frame(Frame::new(false, OpCode::Ping, "")),
                    &mut out
                )
                .is_err()
        );
        assert!(out.is_empty(), "nothing half-written");
    }

    fn any_message() -> impl Strategy<Value = Message> {
        prop_oneof![
            "\\PC{0,300}".prop_map(Message::text),
            proptest::collection::vec(any::<u8>(), 0..70000).prop_map(Message::binary),
            proptest::collection::vec(any::<u8>(), 0..=125).prop_map(|v| Message::Ping(v.into())),
            proptest::collection::vec(any::<u8>(), 0..=125).prop_map(|v| Message::Pong(v.into())),
            (1000u16..=1003, "[a-z ]{0,100}")
                .prop_map(|(c, r)| Message::Close(Some(CloseFrame::new(CloseCode(c), r)))),
            Just(Message::Close(None)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn encode_decode_round_trip(
            msgs in proptest::collection::vec(any_message(), 1..6),
            client_sends in any::<bool>(),
            chunks in proptest::collection::vec(1usize..5000, 1..8),
        ) {
            let (tx, rx) = if client_sends { (Role::Client, Role::Server) } else { (Role::Server, Role::Client) };
            let cfg = Config::default();
            let mut enc = WebSocketCodec::new(tx, &cfg);
            let mut wire = BytesMut::new();
            for m in &msgs {
                enc.encode(m, &mut wire).unwrap();
            }
            let got = all_feeds(rx, &cfg, &wire);
            prop_assert_eq!(got, msgs.into_iter().map(Ok).collect::<Vec<_>>());
            let mut dec = WebSocketCodec::new(rx, &cfg);
            let _ = decode_with(&mut dec, &wire, &Feed::Chunks(chunks));
        }

        #[test]
        fn fragmented_round_trip(text in "\\PC{1,200}", cuts in proptest::collection::vec(0usize..800, 0..5), client_sends in any::<bool>()) {
            let (tx, rx) = if client_sends { (Role::Client, Role::Server) } else { (Role::Server, Role::Client) };
            let cfg = Config::default();
            let mut enc = WebSocketCodec::new(tx, &cfg);
            let bytes = text.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            cuts.push(bytes.len());
            let mut wire = BytesMut::new();
            let mut at = 0;
            for (i, &c) in cuts.iter().enumerate() {
                let op = if i == 0 { OpCode::Text } else { OpCode::Continuation };
                enc.encode_frame(i == cuts.len() - 1, op, &bytes[at..c], &mut wire).unwrap();
                at = c;
            }
            prop_assert_eq!(all_feeds(rx, &cfg, &wire), vec![Ok(Message::text(text.as_str()))]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), server in any::<bool>()) {
            let role = if server { Role::Server } else { Role::Client };
            let cfg = Config::default().max_frame_size(256).max_message_size(512);
            let _ = all_feeds(role, &cfg, &bytes);
        }
    }
}
