//! The Toeplitz hash of Microsoft's RSS specification, and its keys.
//!
//! Model. The key `K` is a bit string; for each bit of the input, most significant bit of the
//! first byte first, the hash XORs in the 32 bits of `K` that start at that bit's position when
//! the bit is set. A key of `k` bytes therefore covers inputs of up to `k - 4` bytes; past its end
//! the key reads as zeros (so a longer input adds nothing, exactly as a shift register would).
//! RSS keys are 40 bytes (the specification's size, enough for the 36-byte IPv6 4-tuple) or 52
//! (what several NICs take); any length from 4 bytes works for [`toeplitz`] itself.
//!
//! Written by hand: no maintained crate implements the RSS flavour of Toeplitz (the key window,
//! the byte order), and it is a dozen lines.

use core::fmt;

/// The verification key of Microsoft's RSS specification, also many drivers' default.
pub const MICROSOFT_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b,
    0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac,
    0x01, 0xfa,
];

/// `6d 5a` twenty times: with a 16-bit period the hash of a tuple equals the hash of the tuple
/// with source and destination swapped, so both directions of a flow reach one queue. The 32-bit
/// result then has equal halves: 16 bits of entropy, enough for an indirection table.
pub const SYMMETRIC_KEY: [u8; 40] = {
    let mut k = [0u8; 40];
    let mut i = 0;
    while i < 40 {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// The Toeplitz hash of `input` under `key` (the specification's `ComputeHash`).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    // `window` holds key bits [i, i + 64) for the input bit i being read, left-aligned.
    let key_byte = |j: usize| u64::from(key.get(j).copied().unwrap_or(0));
    let mut window: u64 = (0..8).fold(0, |w, j| (w << 8) | key_byte(j));
    let mut result = 0u32;
    for (n, &byte) in input.iter().enumerate() {
        for bit in (0..8).rev() {
            if byte >> bit & 1 == 1 {
                result ^= (window >> 32) as u32;
            }
            window <<= 1;
        }
        // Eight bits consumed: bring in the key byte that now starts at bit 56 of the window.
        window |= key_byte(n + 8);
    }
    result
}

/// An RSS secret key: 40 or 52 bytes, with its lookup table.
///
/// The table holds, for each input byte position the key reaches and each byte value, the XOR
/// of the key windows that byte's set bits select; a hash is then one lookup and XOR per input
/// byte instead of eight shifts (40 KiB for a 40-byte key, built once per key).
#[derive(Clone)]
pub struct RssKey {
    key: Vec<u8>,
    table: Vec<[u32; 256]>,
}

impl PartialEq for RssKey {
    fn eq(&self, other: &RssKey) -> bool {
        self.key == other.key
    }
}

impl Eq for RssKey {}

/// Why a key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("{0} bytes: an RSS key is 40 bytes (or 52, as some NICs take)")]
    Length(usize),
    #[error("`{0}` is not hexadecimal (pairs of hex digits, optionally separated by `:`)")]
    Hex(String),
}

impl RssKey {
    /// The key with these bytes, if it has an RSS key's length.
    pub fn new(bytes: &[u8]) -> Result<RssKey, KeyError> {
        match bytes.len() {
            40 | 52 => Ok(RssKey::with_table(bytes)),
            n => Err(KeyError::Length(n)),
        }
    }

    fn with_table(key: &[u8]) -> RssKey {
        let table = (0..key.len())
            .map(|pos| {
                let mut row = [0u32; 256];
                // The window of each bit of this byte; a byte value's entry XORs its set bits'.
                let mut at = [0u32; 8];
                for (bit, w) in at.iter_mut().enumerate() {
                    let mut probe = vec![0u8; pos + 1];
                    probe[pos] = 0x80 >> bit;
                    *w = toeplitz(key, &probe);
                }
                for (v, entry) in row.iter_mut().enumerate() {
                    *entry = (0..8).filter(|b| v & (0x80 >> b) != 0).fold(0, |h, b| h ^ at[b]);
                }
                row
            })
            .collect();
        RssKey {
            key: key.to_vec(),
            table,
        }
    }

    /// Parses `6d5a56da…` or `6d:5a:56:da:…` (as `ethtool -x` prints it).
    pub fn parse_hex(text: &str) -> Result<RssKey, KeyError> {
        RssKey::new(&hex_bytes(text)?)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.key
    }

    /// The hash of `input` under this key (by the table; past the key's reach, bytes add
    /// nothing, as in [`toeplitz`]).
    pub fn hash(&self, input: &[u8]) -> u32 {
        input
            .iter()
            .zip(&self.table)
            .fold(0, |h, (b, row)| h ^ row[usize::from(*b)])
    }
}

impl Default for RssKey {
    /// Microsoft's verification key.
    fn default() -> RssKey {
        RssKey::with_table(&MICROSOFT_KEY)
    }
}

impl fmt::Debug for RssKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex: Vec<String> = self.key.iter().map(|b| format!("{b:02x}")).collect();
        write!(f, "RssKey({})", hex.join(":"))
    }
}

/// Bytes from hex digit pairs, `:` or spaces between pairs allowed.
pub fn hex_bytes(text: &str) -> Result<Vec<u8>, KeyError> {
    let digits: String = text.chars().filter(|c| *c != ':' && !c.is_whitespace()).collect();
    if digits.len() % 2 != 0 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(KeyError::Hex(text.chars().take(40).collect()));
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).map_err(|_| KeyError::Hex(text.into())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The specification's pseudocode, bit by bit, with the key as a big integer that shifts
    /// left: the reference the fast window is checked against.
    fn reference(key: &[u8], input: &[u8]) -> u32 {
        let bit = |i: usize| key.get(i / 8).is_some_and(|b| b >> (7 - i % 8) & 1 == 1);
        let mut result = 0u32;
        for i in 0..input.len() * 8 {
            if input[i / 8] >> (7 - i % 8) & 1 == 1 {
                let left: u32 = (0..32).fold(0, |w, j| (w << 1) | u32::from(bit(i + j)));
                result ^= left;
            }
        }
        result
    }

    #[test]
    fn the_symmetric_key_is_6d5a_repeated() {
        assert_eq!(&SYMMETRIC_KEY[..4], &[0x6d, 0x5a, 0x6d, 0x5a]);
        assert_eq!(SYMMETRIC_KEY[39], 0x5a);
    }

    #[test]
    fn keys_of_the_wrong_length_or_not_hex_are_refused() {
        assert_eq!(RssKey::new(&[0; 39]), Err(KeyError::Length(39)));
        assert!(RssKey::new(&[0; 52]).is_ok());
        assert!(matches!(RssKey::parse_hex("6d:5a:zz"), Err(KeyError::Hex(_))));
        assert!(matches!(RssKey::parse_hex("6d5"), Err(KeyError::Hex(_))));
        let k = RssKey::parse_hex(
            "6d:5a:56:da:25:5b:0e:c2:41:67:25:3d:43:a3:8f:b0:d0:ca:2b:cb:ae:7b:30:b4:77:cb:2d:a3:80:30:f2:0c:6a:42:b7:3b:be:ac:01:fa",
        )
        .unwrap();
        assert_eq!(k, RssKey::default());
    }

    proptest! {
        // Long inputs too: keys up to 200 bytes, inputs past the key's end (zeros there).
        #[test]
        fn the_window_agrees_with_the_bit_serial_reference(
            key in proptest::collection::vec(any::<u8>(), 4..200),
            input in proptest::collection::vec(any::<u8>(), 0..220),
        ) {
            prop_assert_eq!(toeplitz(&key, &input), reference(&key, &input));
        }

        // The key's table gives the window's hash, inputs past the key's reach included.
        #[test]
        fn the_table_agrees_with_the_window(big in any::<bool>(), input in proptest::collection::vec(any::<u8>(), 0..60)) {
            let bytes: Vec<u8> = (0..if big { 52 } else { 40 }).map(|i| (i * 37 + 11) as u8).collect();
            let key = RssKey::new(&bytes).unwrap();
            prop_assert_eq!(key.hash(&input), toeplitz(&bytes, &input));
        }

        // Toeplitz is linear over XOR: h(a ^ b) = h(a) ^ h(b).
        #[test]
        fn the_hash_is_linear(a in proptest::collection::vec(any::<u8>(), 36), b in proptest::collection::vec(any::<u8>(), 36)) {
            let x: Vec<u8> = a.iter().zip(&b).map(|(p, q)| p ^ q).collect();
            prop_assert_eq!(toeplitz(&MICROSOFT_KEY, &x), toeplitz(&MICROSOFT_KEY, &a) ^ toeplitz(&MICROSOFT_KEY, &b));
        }
    }
}
