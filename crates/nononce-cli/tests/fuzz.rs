//! Fuzzing the real `nononce` binary with random bad input.
//!
//! Each case runs the binary, so the case count is a fraction of the other fuzz targets':
//! `NONONCE_FUZZ_CASES / 16` (16 when unset). The crate has no proptest, so inputs come from a
//! seeded generator (a failure names its seed and case): arbitrary strings plus structure-aware
//! ones (right-length text from the hex and base64url alphabets, decimal integers, with stray
//! characters).
//! Properties: input the documented rules reject makes the command fail with exit code 1 and
//! one line on stderr starting `nononce: ` (never a panic, never a usage dump); valid input
//! succeeds; stderr stays proportional to the input.

use crate::common::{KEY, assert_one_line_exit, run, stderr};

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::Output;

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn is_hex(t: &str) -> bool {
    t.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Canonical unpadded base64url of `n` bytes (unused low bits of the last character zero).
fn is_b64(t: &str, n: usize) -> bool {
    let b = t.as_bytes();
    if b.len() != (n * 4).div_ceil(3) || !b.iter().all(|c| B64.contains(c)) {
        return false;
    }
    let last = B64.iter().position(|c| *c == b[b.len() - 1]).unwrap_or(0);
    let unused = b.len() * 6 - n * 8;
    last & ((1 << unused) - 1) == 0
}

/// Whether `decode` (`--input auto`) has a reading of `text`: 16, 24 or 32 hex digits (`0x`
/// before them allowed); 11, 16 or 22 base64url characters; decimal digits, as an integer of
/// at most 128 bits; surrounding whitespace ignored. A text with a reading may still be
/// refused: two readings could both be the nonce, or none is of a nonce made yet.
fn valid_nonce(text: &str) -> bool {
    let t = text.trim();
    let digits =
        !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) && t.parse::<u128>().is_ok();
    let hex = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    let hex = matches!(hex.chars().count(), 16 | 24 | 32) && is_hex(hex);
    let b64 = match t.chars().count() {
        11 => is_b64(t, 8),
        16 => is_b64(t, 12),
        22 => is_b64(t, 16),
        _ => false,
    };
    digits || hex || b64
}

/// A failure the user can act on (exit code `code`: 1 for a nonce that cannot be read, 2 for
/// an option value that cannot work; one `nononce: ` line) that says `needle`. Messages quote
/// at most 40 characters of the input, escaped onto one line.
fn assert_clean_failure(out: &Output, code: i32, input: &str, needle: &str) {
    let err = assert_one_line_exit(out, &format!("{input:?}"), code);
    assert!(err.contains(needle), "{input:?}: {err}");
    assert!(err.len() <= 700, "{} bytes", err.len());
}

fn assert_success(out: &Output, input: &str, prefix: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{input:?}: {}", stderr(out));
    assert!(stdout.starts_with(prefix), "{input:?}: {stdout}");
    assert_eq!(stdout.lines().count(), 1, "{input:?}: {stdout}");
}

/// Inputs drawn from lease-core's seeded generator.
struct Gen(nononce::lease::SplitMix64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).expect("below n")
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// Any character but NUL (which no argument can hold).
    fn any_char(&mut self) -> char {
        loop {
            let c = match self.below(4) {
                0 => Some(char::from(self.next().to_le_bytes()[0] & 0x7f)),
                1 => char::from_u32(u32::try_from(self.next() % 0x800).unwrap()),
                _ => char::from_u32(u32::try_from(self.next() % 0x11_0000).unwrap()),
            };
            if let Some(c) = c.filter(|&c| c != '\0') {
                return c;
            }
        }
    }

    /// `len` characters, mostly from `alphabet`.
    fn text_from(&mut self, alphabet: &[u8], len: usize) -> String {
        (0..len)
            .map(|_| {
                if self.below(14) == 0 {
                    self.any_char()
                } else {
                    char::from(self.pick(alphabet))
                }
            })
            .collect()
    }

    /// An argument: arbitrary text, near-valid nonce text, padded hex, decimal integers, or a
    /// long run.
    fn arg(&mut self) -> String {
        let lens = [10, 11, 12, 15, 16, 17, 21, 22, 23, 24, 31, 32, 33, 64];
        match self.below(7) {
            0 => {
                let len = self.below(40);
                (0..len).map(|_| self.any_char()).collect()
            }
            1 | 2 => {
                let len = self.pick(&lens);
                self.text_from(b"0123456789abcdefABCDEF", len)
            }
            3 => {
                let len = self.pick(&lens);
                self.text_from(B64, len)
            }
            4 => {
                let pad = [" ", "\t", "\n", ""];
                let (a, b) = (self.pick(&pad), self.pick(&pad));
                let len = self.pick(&[16, 24, 32]);
                format!("{a}{}{b}", self.text_from(b"0123456789abcdef", len))
            }
            5 => {
                let len = 1 + self.below(45);
                self.text_from(b"0123456789", len)
            }
            _ => "f".repeat(1 + self.below(100_000)),
        }
    }
}

/// `NONONCE_FUZZ_CASES / 16` cases (default 256 / 16).
fn cases() -> u64 {
    let all: u64 = std::env::var("NONONCE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    (all / 16).max(8)
}

/// Runs `case` on `cases()` inputs from a generator seeded with `seed`; a failure names the
/// seed and case.
fn fuzz(seed: u64, mut case: impl FnMut(&mut Gen)) {
    let mut g = Gen(nononce::lease::SplitMix64::new(seed));
    for n in 0..cases() {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| case(&mut g))) {
            let message = panic.downcast_ref::<String>().map_or("", String::as_str);
            panic!("seed {seed:#x}, case {n}: {message}");
        }
    }
}

#[test]
fn decode_random_text() {
    fuzz(0xc11_0001, |g| {
        let text = g.arg();
        let out = run(&["decode", "--", &text]);
        if valid_nonce(&text) && out.status.success() {
            assert_success(&out, &text, "bits=");
        } else if valid_nonce(&text) {
            // Two readings that could both be the nonce, or none of a nonce made yet.
            assert_clean_failure(&out, 1, &text, "--input");
        } else {
            assert_clean_failure(&out, 1, &text, "malformed nonce");
        }
    });
}

/// Any epoch with any nonce decodes as hex (the Unix time saturates rather than overflowing).
#[test]
fn decode_any_epoch() {
    fuzz(0xc11_0002, |g| {
        let len = g.pick(&[16, 24, 32]);
        let nonce = g
            .text_from(b"0123456789abcdef", len)
            .replace(|c: char| !c.is_ascii_hexdigit(), "0");
        let epoch = if g.below(2) == 0 {
            g.next()
        } else {
            u64::MAX - (g.next() >> 21)
        };
        let out = run(&[
            "decode",
            "--input",
            "hex",
            "--epoch-ms",
            &epoch.to_string(),
            "--format",
            "json",
            &nonce,
        ]);
        assert_success(&out, &nonce, "{");
    });
}

#[test]
fn encrypt_random_nonce() {
    fuzz(0xc11_0003, |g| {
        let text = g.arg();
        let command = g.pick(&["encrypt", "decrypt"]);
        let out = run(&[command, "--base-key-hex", KEY, "--", &text]);
        let t = text.trim();
        let hex_nonce = matches!(t.len(), 16 | 24 | 32) && is_hex(t);
        // Blowfish (the default 96-bit cipher) only takes 96-bit nonces ending in 32 zero bits.
        let zero_tail = t.len() != 24 || t.ends_with("00000000");
        if hex_nonce && zero_tail {
            assert_success(&out, &text, "");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(stdout.trim().len(), t.len(), "{text:?}: {stdout}");
        } else {
            assert_clean_failure(&out, 1, &text, "");
        }
    });
}

#[test]
fn encrypt_random_key() {
    fuzz(0xc11_0004, |g| {
        let key = match g.below(5) {
            0 => g.arg(),
            1 => {
                let len = g.below(64);
                g.text_from(b"0123456789abcdef", len)
            }
            2 => {
                let len = g.pick(&[63, 65, 66, 80, 128]);
                g.text_from(b"0123456789abcdefABCDEF", len)
            }
            3 => format!("{KEY}{}", g.any_char()),
            _ => format!(" {KEY}\t"),
        };
        let out = run(&[
            "encrypt",
            "0123456789abcdef",
            &format!("--base-key-hex={key}"),
        ]);
        let t = key.trim();
        if t.len() % 2 == 0 && t.len() >= 64 && is_hex(t) {
            assert_success(&out, &key, "");
        } else {
            assert_clean_failure(&out, 2, &key, "base key");
        }
    });
}

#[test]
fn unknown_ciphers_and_stores_are_refused() {
    fuzz(0xc11_0005, |g| {
        let name = match g.below(3) {
            0 => g.arg(),
            1 => g
                .pick(&[
                    "aes", "AES", " aes", "speck", "blowfish", "des3", "3des", "rot13", "",
                ])
                .to_owned(),
            _ => {
                let mut name = g.pick(&["aes", "speck", "blowfish", "des3"]).to_owned();
                name.insert(g.below(name.len() + 1), g.any_char());
                name
            }
        };
        for flag in ["--cipher64", "--cipher96", "--cipher128"] {
            let valid = if flag == "--cipher128" {
                ["aes", "speck"].contains(&name.as_str())
            } else {
                ["blowfish", "des3", "speck"].contains(&name.as_str())
            };
            let out = run(&[
                "encrypt",
                "0123456789abcdef",
                "--base-key-hex",
                KEY,
                &format!("{flag}={name}"),
            ]);
            if valid {
                assert_success(&out, &name, "");
            } else {
                // A bad value is clap's to report (exit code 2), with the cipher's own message.
                let err = assert_one_line_exit(&out, &format!("{name:?}"), 2);
                assert!(err.contains("cipher: use"), "{name:?}: {err}");
            }
        }
        // A store URL of no known scheme: one line naming the schemes.
        if !["redis://", "rediss://", "env:", "hosts:"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            let out = run(&["gen", &format!("--store={name}")]);
            assert_clean_failure(&out, 2, &name, "unknown store");
        }
    });
}
