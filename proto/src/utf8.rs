//! Incremental UTF-8 validation.
//!
//! Text arrives in pieces: frames, and reads within a frame. The validator is
//! fed each piece once, as it arrives, and fails on the first byte that can
//! no longer be part of valid UTF-8, so invalid text is refused without
//! waiting for the rest of the message. A code point split across pieces is
//! carried (at most three bytes) until the piece that completes it.

/// Returned when the bytes fed so far cannot be the start of valid UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidUtf8;

/// A UTF-8 validator that can be fed a text in any number of pieces.
#[derive(Debug, Clone, Default)]
pub struct Utf8Validator {
    partial: [u8; 4],
    partial_len: u8,
}

/// The length of the sequence a lead byte starts; 0 for bytes that cannot
/// lead (std has already refused those before we ask).
fn sequence_len(lead: u8) -> usize {
    match lead {
        0x00..=0x7F => 1,
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    }
}

/// Where validation stopped: `Err((valid_up_to, complete))`, where
/// `complete` is false when the input merely ends inside a code point.
#[inline]
fn check(input: &[u8]) -> Result<(), (usize, bool)> {
    #[cfg(feature = "simd")]
    let r =
        simdutf8::compat::from_utf8(input).map_err(|e| (e.valid_up_to(), e.error_len().is_some()));
    #[cfg(not(feature = "simd"))]
    let r = std::str::from_utf8(input).map_err(|e| (e.valid_up_to(), e.error_len().is_some()));
    r.map(|_| ())
}

impl Utf8Validator {
    /// A validator at the start of a text.
    pub fn new() -> Self {
        Self::default()
    }

    /// Validates the next piece of the text.
    pub fn feed(&mut self, mut input: &[u8]) -> Result<(), InvalidUtf8> {
        if self.partial_len > 0 {
            let have = usize::from(self.partial_len);
            let need = sequence_len(self.partial[0]) - have;
            let take = need.min(input.len());
            self.partial[have..have + take].copy_from_slice(&input[..take]);
            let len = have + take;
            match check(&self.partial[..len]) {
                Ok(()) => self.partial_len = 0,
                Err((_, true)) => return Err(InvalidUtf8),
                Err((_, false)) => {
                    // Still a valid but unfinished prefix: the input ran out.
                    self.partial_len = len as u8;
                    return Ok(());
                }
            }
            input = &input[take..];
        }
        match check(input) {
            Ok(()) => Ok(()),
            Err((_, true)) => Err(InvalidUtf8),
            Err((valid_up_to, false)) => {
                let tail = &input[valid_up_to..];
                self.partial[..tail.len()].copy_from_slice(tail);
                self.partial_len = tail.len() as u8;
                Ok(())
            }
        }
    }

    /// Ends the text: fails if it stopped inside a code point. Leaves the
    /// validator ready for a new text.
    pub fn finish(&mut self) -> Result<(), InvalidUtf8> {
        let incomplete = self.partial_len != 0;
        self.partial_len = 0;
        if incomplete { Err(InvalidUtf8) } else { Ok(()) }
    }

    /// Whether a code point is waiting for more bytes.
    pub fn is_incomplete(&self) -> bool {
        self.partial_len != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn validate_split(bytes: &[u8], splits: &[usize]) -> Result<(), InvalidUtf8> {
        let mut v = Utf8Validator::new();
        let mut at = 0;
        for &s in splits {
            let s = s.clamp(at, bytes.len());
            v.feed(&bytes[at..s])?;
            at = s;
        }
        v.feed(&bytes[at..])?;
        v.finish()
    }

    #[test]
    fn agrees_with_std_at_every_split_point() {
        let samples: Vec<Vec<u8>> = vec![
            "Hello-µ@ßöäüàá-UTF-8!!".into(),
            "κόσμε".into(),
            "\u{10FFFF}\u{FFFF}\u{7FF}\u{80}".into(),
            vec![
                0xce, 0xba, 0xe1, 0xbd, 0xb9, 0xcf, 0x83, 0xce, 0xbc, 0xce, 0xb5, 0xed, 0xa0, 0x80,
            ],
            vec![0xf4, 0x90, 0x80, 0x80],
            vec![0xe0, 0x80, 0xaf],
            vec![0xc0, 0xaf],
            vec![0xed, 0x9f, 0xbf, 0xee, 0x80, 0x80],
            vec![0xf0, 0x9f, 0x98],
            vec![0x80],
            vec![0xff],
        ];
        for s in &samples {
            let expect = std::str::from_utf8(s).is_ok();
            for a in 0..=s.len() {
                for b in a..=s.len() {
                    assert_eq!(
                        validate_split(s, &[a, b]).is_ok(),
                        expect,
                        "{s:x?} split {a},{b}"
                    );
                }
            }
        }
    }

    #[test]
    fn fails_as_soon_as_an_invalid_byte_arrives() {
        // "κόσμε" then the start of a surrogate (ed a0): the second byte is
        // already impossible, long before the message ends.
        let mut v = Utf8Validator::new();
        v.feed("κόσμε".as_bytes()).unwrap();
        v.feed(&[0xed]).unwrap();
        assert_eq!(v.feed(&[0xa0]), Err(InvalidUtf8));
    }

    #[test]
    fn a_truncated_code_point_fails_only_at_finish() {
        let mut v = Utf8Validator::new();
        v.feed(&[0xf0, 0x9f]).unwrap();
        assert!(v.is_incomplete());
        assert_eq!(v.finish(), Err(InvalidUtf8));
        // finish resets for the next text
        v.feed(b"ok").unwrap();
        assert_eq!(v.finish(), Ok(()));
    }

    #[test]
    fn one_byte_at_a_time() {
        let text = "ab€𝄞c".as_bytes();
        let mut v = Utf8Validator::new();
        for b in text {
            v.feed(std::slice::from_ref(b)).unwrap();
        }
        v.finish().unwrap();
    }

    proptest! {
        #[test]
        fn agrees_with_std_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64), a in 0usize..64, b in 0usize..64) {
            let (a, b) = (a.min(b), a.max(b));
            prop_assert_eq!(validate_split(&bytes, &[a, b]).is_ok(), std::str::from_utf8(&bytes).is_ok());
        }

        #[test]
        fn valid_strings_pass_in_any_pieces(s in "\\PC*", cuts in proptest::collection::vec(0usize..256, 0..6)) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            prop_assert!(validate_split(s.as_bytes(), &cuts).is_ok());
        }
    }
}
