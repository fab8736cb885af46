//! GitHub's webhook signatures: `X-Hub-Signature-256: sha256=<hex>`, the
//! HMAC-SHA256 of the raw request body keyed with the webhook's secret.
//!
//! Pure functions over bytes, so that they can be fuzzed: [`verify`] takes
//! the secret, the header's value (if any) and the body, and says whether
//! the delivery is signed with that secret. The comparison of the
//! signatures is constant-time ([`Mac::verify_slice`]); only the header's
//! shape (which the sender chose) is checked in ordinary time.
//!
//! The header is `sha256=` (lowercase, as GitHub sends it) followed by
//! exactly 64 hexadecimal digits, in either case: GitHub sends lowercase,
//! and a digit's case changes no bit of the signature. Nothing else is
//! accepted: no whitespace inside the value, no other algorithm, no second
//! signature.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The header GitHub signs each webhook delivery with.
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";

/// What every signature starts with.
pub const PREFIX: &str = "sha256=";

/// The bytes of an HMAC-SHA256 signature.
const TAG_LEN: usize = 32;

/// Why a delivery's signature is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The delivery carries no `X-Hub-Signature-256` header.
    #[error("missing X-Hub-Signature-256 header")]
    Missing,
    /// The header is not `sha256=` and 64 hexadecimal digits, or it is sent
    /// more than once.
    #[error("malformed X-Hub-Signature-256 header: expected sha256= and 64 hex digits")]
    Malformed,
    /// The header is well formed but is not the body's signature with the
    /// secret.
    #[error("X-Hub-Signature-256 does not match the body")]
    Mismatch,
}

/// A webhook secret, ready to sign and verify. Its `Debug` output never
/// shows the secret, and nothing else prints it.
#[derive(Clone)]
pub struct WebhookSecret {
    /// The HMAC keyed with the secret, before any body.
    mac: HmacSha256,
}

impl WebhookSecret {
    /// The secret `bytes`; `None` when they are empty (GitHub sends no
    /// signature for a webhook without a secret).
    pub fn new(bytes: &[u8]) -> Option<WebhookSecret> {
        if bytes.is_empty() {
            return None;
        }
        // HMAC accepts keys of any length: this never fails.
        let mac = <HmacSha256 as KeyInit>::new_from_slice(bytes).ok()?;
        Some(WebhookSecret { mac })
    }

    /// The `X-Hub-Signature-256` value GitHub sends with `body`:
    /// `sha256=` and 64 lowercase hexadecimal digits.
    pub fn sign(&self, body: &[u8]) -> String {
        let tag = self.mac.clone().chain_update(body).finalize().into_bytes();
        let mut header = String::with_capacity(PREFIX.len() + 2 * TAG_LEN);
        header.push_str(PREFIX);
        for byte in tag {
            header.push(char::from(HEX[usize::from(byte >> 4)]));
            header.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        header
    }

    /// Whether `header` (the value of `X-Hub-Signature-256`, `None` when
    /// absent) is the signature of `body` with this secret.
    ///
    /// # Errors
    ///
    /// [`SignatureError::Missing`] without a header,
    /// [`SignatureError::Malformed`] when it is not `sha256=` and 64
    /// hexadecimal digits, [`SignatureError::Mismatch`] when it signs
    /// something else.
    pub fn verify(&self, header: Option<&[u8]>, body: &[u8]) -> Result<(), SignatureError> {
        let tag = parse(header)?;
        self.mac
            .clone()
            .chain_update(body)
            .verify_slice(&tag)
            .map_err(|_| SignatureError::Mismatch)
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// Whether `header` (the value of `X-Hub-Signature-256`, `None` when
/// absent) is the signature of `body` with `secret`. An empty secret
/// verifies nothing.
///
/// # Errors
///
/// As [`WebhookSecret::verify`]; [`SignatureError::Mismatch`] for any
/// well-formed header when `secret` is empty.
pub fn verify(secret: &[u8], header: Option<&[u8]>, body: &[u8]) -> Result<(), SignatureError> {
    parse(header)?;
    match WebhookSecret::new(secret) {
        Some(secret) => secret.verify(header, body),
        None => Err(SignatureError::Mismatch),
    }
}

/// The signature a header carries: its shape only, no secret involved.
///
/// # Errors
///
/// [`SignatureError::Missing`] or [`SignatureError::Malformed`].
pub fn parse(header: Option<&[u8]>) -> Result<[u8; TAG_LEN], SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let hex = header
        .strip_prefix(PREFIX.as_bytes())
        .ok_or(SignatureError::Malformed)?;
    if hex.len() != 2 * TAG_LEN {
        return Err(SignatureError::Malformed);
    }
    let mut tag = [0u8; TAG_LEN];
    for (byte, pair) in tag.iter_mut().zip(hex.chunks_exact(2)) {
        let [high, low] = pair else {
            return Err(SignatureError::Malformed);
        };
        *byte = (digit(*high)? << 4) | digit(*low)?;
    }
    Ok(tag)
}

/// Lowercase hexadecimal digits, by value.
const HEX: &[u8; 16] = b"0123456789abcdef";

/// The value of one hexadecimal digit, either case.
fn digit(c: u8) -> Result<u8, SignatureError> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(SignatureError::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's documented example: secret "It's a Secret to Everybody",
    /// payload "Hello, World!".
    const GITHUB_SECRET: &[u8] = b"It's a Secret to Everybody";
    const GITHUB_BODY: &[u8] = b"Hello, World!";
    const GITHUB_SIGNATURE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn githubs_documented_example_verifies() {
        let Some(secret) = WebhookSecret::new(GITHUB_SECRET) else {
            panic!("a non-empty secret")
        };
        assert_eq!(secret.sign(GITHUB_BODY), GITHUB_SIGNATURE);
        let header = Some(GITHUB_SIGNATURE.as_bytes());
        assert_eq!(verify(GITHUB_SECRET, header, GITHUB_BODY), Ok(()));
        assert_eq!(secret.verify(header, GITHUB_BODY), Ok(()));
        let upper = format!("sha256={}", GITHUB_SIGNATURE[7..].to_uppercase());
        assert_eq!(
            verify(GITHUB_SECRET, Some(upper.as_bytes()), GITHUB_BODY),
            Ok(()),
            "hex digits in either case"
        );
    }

    #[test]
    fn wrong_secret_body_or_signature_is_a_mismatch() {
        let header = Some(GITHUB_SIGNATURE.as_bytes());
        assert_eq!(
            verify(b"another secret", header, GITHUB_BODY),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(GITHUB_SECRET, header, b"Hello, World?"),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(b"", header, GITHUB_BODY),
            Err(SignatureError::Mismatch)
        );
        let mut flipped = GITHUB_SIGNATURE.as_bytes().to_vec();
        flipped[10] = b'0';
        assert_eq!(
            verify(GITHUB_SECRET, Some(&flipped), GITHUB_BODY),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn malformed_headers_are_refused_before_any_mac() {
        let hex = &GITHUB_SIGNATURE[7..];
        let cases: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"sha256=".to_vec(),
            format!("SHA256={hex}").into_bytes(),
            format!("sha1={hex}").into_bytes(),
            format!("sha256= {hex}").into_bytes(),
            format!("sha256={hex} ").into_bytes(),
            format!("sha256={}", &hex[1..]).into_bytes(),
            format!("sha256={hex}0").into_bytes(),
            format!("sha256={}g", &hex[1..]).into_bytes(),
            format!("{GITHUB_SIGNATURE},{GITHUB_SIGNATURE}").into_bytes(),
            format!("sha256={}é", &hex[2..]).into_bytes(),
        ];
        for case in cases {
            assert_eq!(
                verify(GITHUB_SECRET, Some(&case), GITHUB_BODY),
                Err(SignatureError::Malformed),
                "{:?}",
                String::from_utf8_lossy(&case)
            );
        }
        assert_eq!(
            verify(GITHUB_SECRET, None, GITHUB_BODY),
            Err(SignatureError::Missing)
        );
    }

    #[test]
    fn debug_and_errors_never_show_the_secret() {
        let Some(secret) = WebhookSecret::new(b"hunter2-planted") else {
            panic!("a non-empty secret")
        };
        assert_eq!(format!("{secret:?}"), "WebhookSecret(<redacted>)");
        assert!(WebhookSecret::new(b"").is_none());
        for err in [
            SignatureError::Missing,
            SignatureError::Malformed,
            SignatureError::Mismatch,
        ] {
            assert!(!format!("{err} {err:?}").contains("hunter2"));
        }
    }
}
