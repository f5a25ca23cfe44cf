//! Frame headers (RFC 6455 §5.2): parse, check and encode.

use crate::Role;
use crate::error::{Error, ProtocolError};

/// The most bytes a frame header can take: 2 + 8 (length) + 4 (mask key).
pub const MAX_HEADER_LEN: usize = 14;

/// The largest payload a control frame may carry.
pub const MAX_CONTROL_PAYLOAD: u64 = 125;

/// A frame's opcode. Reserved opcodes are refused when parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpCode {
    /// 0x0: a later fragment of a text or binary message.
    Continuation,
    /// 0x1: the first frame of a text message.
    Text,
    /// 0x2: the first frame of a binary message.
    Binary,
    /// 0x8: close.
    Close,
    /// 0x9: ping.
    Ping,
    /// 0xA: pong.
    Pong,
}

impl OpCode {
    /// Decodes the low nibble of the first header byte.
    pub fn from_u8(v: u8) -> Result<OpCode, ProtocolError> {
        Ok(match v {
            0x0 => OpCode::Continuation,
            0x1 => OpCode::Text,
            0x2 => OpCode::Binary,
            0x8 => OpCode::Close,
            0x9 => OpCode::Ping,
            0xA => OpCode::Pong,
            other => return Err(ProtocolError::ReservedOpcode(other)),
        })
    }

    /// The wire value.
    pub fn as_u8(self) -> u8 {
        match self {
            OpCode::Continuation => 0x0,
            OpCode::Text => 0x1,
            OpCode::Binary => 0x2,
            OpCode::Close => 0x8,
            OpCode::Ping => 0x9,
            OpCode::Pong => 0xA,
        }
    }

    /// Close, ping and pong.
    pub fn is_control(self) -> bool {
        matches!(self, OpCode::Close | OpCode::Ping | OpCode::Pong)
    }
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Last frame of the message.
    pub fin: bool,
    /// RSV1, RSV2, RSV3 as the bits 0b100, 0b010, 0b001.
    pub rsv: u8,
    /// The opcode.
    pub opcode: OpCode,
    /// The masking key, if the frame is masked.
    pub mask: Option<[u8; 4]>,
    /// The payload length.
    pub payload_len: u64,
}

impl FrameHeader {
    /// Parses a header from the front of `buf`.
    ///
    /// Returns `Ok(None)` when `buf` does not hold the whole header yet, and
    /// the header with its length in bytes otherwise. Only rules that need
    /// nothing but the header bytes are checked here (reserved opcodes, the
    /// 64-bit length's top bit, control frame length and fragmentation); see
    /// [`FrameHeader::check`] for the rest.
    pub fn parse(buf: &[u8]) -> Result<Option<(FrameHeader, usize)>, ProtocolError> {
        let [b0, b1, ..] = *buf else {
            return Ok(None);
        };
        let fin = b0 & 0x80 != 0;
        let rsv = (b0 >> 4) & 0x07;
        let opcode = OpCode::from_u8(b0 & 0x0F)?;
        let masked = b1 & 0x80 != 0;
        let (payload_len, mut at) = match b1 & 0x7F {
            126 => {
                let Some(b) = buf.get(2..4) else {
                    return Ok(None);
                };
                (u64::from(u16::from_be_bytes([b[0], b[1]])), 4)
            }
            127 => {
                let Some(b) = buf.get(2..10) else {
                    return Ok(None);
                };
                let mut w = [0u8; 8];
                w.copy_from_slice(b);
                let len = u64::from_be_bytes(w);
                if len >> 63 != 0 {
                    return Err(ProtocolError::InvalidLength);
                }
                (len, 10)
            }
            n => (u64::from(n), 2),
        };
        if opcode.is_control() {
            if !fin {
                return Err(ProtocolError::FragmentedControlFrame);
            }
            if payload_len > MAX_CONTROL_PAYLOAD {
                return Err(ProtocolError::ControlFrameTooLong(payload_len));
            }
        }
        let mask = if masked {
            let Some(k) = buf.get(at..at + 4) else {
                return Ok(None);
            };
            at += 4;
            Some([k[0], k[1], k[2], k[3]])
        } else {
            None
        };
        Ok(Some((
            FrameHeader {
                fin,
                rsv,
                opcode,
                mask,
                payload_len,
            },
            at,
        )))
    }

    /// Checks the rules that depend on who is reading: masking direction
    /// (clients must mask, servers must not) and RSV bits, of which only those
    /// in `allowed_rsv` (claimed by a negotiated extension) may be set.
    pub fn check(
        &self,
        reader: Role,
        allowed_rsv: u8,
        accept_unmasked: bool,
    ) -> Result<(), ProtocolError> {
        if self.rsv & !allowed_rsv != 0 {
            return Err(ProtocolError::ReservedBits);
        }
        match (reader, self.mask.is_some()) {
            (Role::Server, false) if !accept_unmasked => Err(ProtocolError::UnmaskedFrame),
            (Role::Client, true) => Err(ProtocolError::MaskedFrame),
            _ => Ok(()),
        }
    }

    /// Checks that a frame this side is about to send may have this header:
    /// control frames are never fragmented and carry at most 125 bytes.
    #[inline]
    pub fn check_outgoing(&self) -> Result<(), Error> {
        if self.opcode.is_control() {
            if !self.fin {
                return Err(Error::InvalidMessage("control frames cannot be fragmented"));
            }
            if self.payload_len > MAX_CONTROL_PAYLOAD {
                return Err(Error::InvalidMessage(
                    "control frame payload over 125 bytes",
                ));
            }
        }
        Ok(())
    }

    /// The header's first byte: FIN, RSV bits and opcode.
    #[inline]
    pub fn first_byte(&self) -> u8 {
        (u8::from(self.fin) << 7) | ((self.rsv & 0x07) << 4) | self.opcode.as_u8()
    }

    /// Writes the header into `dst` and returns how many bytes it took.
    /// The shortest length encoding is always used.
    pub fn encode(&self, dst: &mut [u8; MAX_HEADER_LEN]) -> usize {
        dst[0] = self.first_byte();
        let mask_bit = if self.mask.is_some() { 0x80 } else { 0 };
        let mut at = match self.payload_len {
            n @ 0..=125 => {
                dst[1] = mask_bit | n as u8;
                2
            }
            n @ 126..=0xFFFF => {
                dst[1] = mask_bit | 126;
                dst[2..4].copy_from_slice(&(n as u16).to_be_bytes());
                4
            }
            n => {
                dst[1] = mask_bit | 127;
                dst[2..10].copy_from_slice(&n.to_be_bytes());
                10
            }
        };
        if let Some(key) = self.mask {
            dst[at..at + 4].copy_from_slice(&key);
            at += 4;
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_full(buf: &[u8]) -> (FrameHeader, usize) {
        FrameHeader::parse(buf).unwrap().unwrap()
    }

    #[test]
    fn rfc_single_frame_unmasked_text() {
        // RFC 6455 §5.7: 0x81 0x05 "Hello"
        let (h, n) = parse_full(&[0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f]);
        assert_eq!(n, 2);
        assert!(h.fin);
        assert_eq!(h.opcode, OpCode::Text);
        assert_eq!(h.mask, None);
        assert_eq!(h.payload_len, 5);
        assert_eq!(h.rsv, 0);
    }

    #[test]
    fn rfc_single_frame_masked_text() {
        let (h, n) = parse_full(&[0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f]);
        assert_eq!(n, 6);
        assert_eq!(h.mask, Some([0x37, 0xfa, 0x21, 0x3d]));
        assert_eq!(h.payload_len, 5);
    }

    #[test]
    fn rfc_fragmented_text() {
        let (h1, _) = parse_full(&[0x01, 0x03, 0x48, 0x65, 0x6c]);
        assert!(!h1.fin);
        assert_eq!(h1.opcode, OpCode::Text);
        assert_eq!(h1.payload_len, 3);
        let (h2, _) = parse_full(&[0x80, 0x02, 0x6c, 0x6f]);
        assert!(h2.fin);
        assert_eq!(h2.opcode, OpCode::Continuation);
    }

    #[test]
    fn rfc_ping_and_pong() {
        let (ping, _) = parse_full(&[0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f]);
        assert_eq!(ping.opcode, OpCode::Ping);
        let (pong, _) = parse_full(&[0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d]);
        assert_eq!(pong.opcode, OpCode::Pong);
        assert!(pong.mask.is_some());
    }

    #[test]
    fn rfc_256_byte_binary_uses_16_bit_length() {
        let (h, n) = parse_full(&[0x82, 0x7E, 0x01, 0x00]);
        assert_eq!(n, 4);
        assert_eq!(h.opcode, OpCode::Binary);
        assert_eq!(h.payload_len, 256);
    }

    #[test]
    fn rfc_64kib_binary_uses_64_bit_length() {
        let (h, n) = parse_full(&[0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(n, 10);
        assert_eq!(h.payload_len, 65536);
    }

    #[test]
    fn incomplete_headers_ask_for_more() {
        let full = [0x82, 0xFF, 0, 0, 0, 0, 0, 1, 0, 0, 1, 2, 3, 4];
        for cut in 0..full.len() {
            assert_eq!(FrameHeader::parse(&full[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(parse_full(&full).1, 14);
    }

    #[test]
    fn top_bit_of_64_bit_length_is_refused() {
        let buf = [0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(FrameHeader::parse(&buf), Err(ProtocolError::InvalidLength));
    }

    #[test]
    fn huge_length_parses_without_allocation() {
        let buf = [0x82, 0x7F, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF];
        assert_eq!(parse_full(&buf).0.payload_len, (1u64 << 63) - 1);
    }

    #[test]
    fn reserved_opcodes_are_refused() {
        for op in [3u8, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF] {
            assert_eq!(
                FrameHeader::parse(&[0x80 | op, 0]),
                Err(ProtocolError::ReservedOpcode(op))
            );
        }
    }

    #[test]
    fn control_frames_must_not_be_fragmented() {
        for op in [0x8u8, 0x9, 0xA] {
            assert_eq!(
                FrameHeader::parse(&[op, 0]),
                Err(ProtocolError::FragmentedControlFrame)
            );
        }
    }

    #[test]
    fn control_frames_are_at_most_125_bytes() {
        assert!(FrameHeader::parse(&[0x89, 125]).unwrap().is_some());
        assert_eq!(
            FrameHeader::parse(&[0x89, 126, 0, 126]),
            Err(ProtocolError::ControlFrameTooLong(126))
        );
    }

    #[test]
    fn rsv_bits_need_an_extension() {
        for rsv in 1..8u8 {
            let (h, _) = parse_full(&[0x80 | (rsv << 4) | 0x2, 0x80, 1, 2, 3, 4]);
            assert_eq!(h.rsv, rsv);
            assert_eq!(
                h.check(Role::Server, 0, false),
                Err(ProtocolError::ReservedBits)
            );
        }
        let (h, _) = parse_full(&[0xC2, 0x80, 1, 2, 3, 4]);
        assert_eq!(h.check(Role::Server, 0b100, false), Ok(()));
    }

    #[test]
    fn masking_direction_is_enforced() {
        let (masked, _) = parse_full(&[0x82, 0x80, 1, 2, 3, 4]);
        let (unmasked, _) = parse_full(&[0x82, 0x00]);
        assert_eq!(masked.check(Role::Server, 0, false), Ok(()));
        assert_eq!(
            unmasked.check(Role::Server, 0, false),
            Err(ProtocolError::UnmaskedFrame)
        );
        assert_eq!(unmasked.check(Role::Server, 0, true), Ok(()));
        assert_eq!(unmasked.check(Role::Client, 0, false), Ok(()));
        assert_eq!(
            masked.check(Role::Client, 0, false),
            Err(ProtocolError::MaskedFrame)
        );
    }

    #[test]
    fn encode_rfc_examples() {
        let mut out = [0u8; MAX_HEADER_LEN];
        let h = FrameHeader {
            fin: true,
            rsv: 0,
            opcode: OpCode::Text,
            mask: Some([0x37, 0xfa, 0x21, 0x3d]),
            payload_len: 5,
        };
        let n = h.encode(&mut out);
        assert_eq!(&out[..n], &[0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d]);
        let h = FrameHeader {
            fin: true,
            rsv: 0,
            opcode: OpCode::Binary,
            mask: None,
            payload_len: 256,
        };
        let n = h.encode(&mut out);
        assert_eq!(&out[..n], &[0x82, 0x7E, 0x01, 0x00]);
        let h = FrameHeader {
            payload_len: 65536,
            ..h
        };
        let n = h.encode(&mut out);
        assert_eq!(&out[..n], &[0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0]);
    }

    fn any_opcode() -> impl Strategy<Value = OpCode> {
        prop_oneof![
            Just(OpCode::Continuation),
            Just(OpCode::Text),
            Just(OpCode::Binary),
            Just(OpCode::Close),
            Just(OpCode::Ping),
            Just(OpCode::Pong),
        ]
    }

    proptest! {
        #[test]
        fn encode_parse_round_trip(
            fin in any::<bool>(),
            rsv in 0u8..8,
            opcode in any_opcode(),
            mask in any::<Option<[u8; 4]>>(),
            len in prop_oneof![0u64..=125, 126u64..=65535, 65536u64..(1 << 63)],
        ) {
            let (fin, len) = if opcode.is_control() { (true, len % 126) } else { (fin, len) };
            let h = FrameHeader { fin, rsv, opcode, mask, payload_len: len };
            let mut out = [0u8; MAX_HEADER_LEN];
            let n = h.encode(&mut out);
            prop_assert_eq!(FrameHeader::parse(&out[..n]), Ok(Some((h, n))));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..20)) {
            let _ = FrameHeader::parse(&bytes);
        }
    }
}
