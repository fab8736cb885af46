//! The `webhook_signature` target: the demo's `X-Hub-Signature-256` check,
//! [`verify`] and [`WebhookSecret`].

use tollgate_demo::signature::{PREFIX, SignatureError, WebhookSecret, verify};

/// The control bytes read before the secret, the header and the body.
const CONTROL: usize = 6;

/// Splits `data` into a secret, an optional header and a body, and checks
/// them; panics when a property breaks:
///
/// - the empty secret, and only it, is refused by [`WebhookSecret::new`];
/// - an arbitrary header is [`SignatureError::Missing`] when absent,
///   [`SignatureError::Malformed`] exactly when it is not `sha256=` and 64
///   hexadecimal digits, and verifies exactly when the secret is not empty
///   and the digits are the body's HMAC-SHA256 up to their case;
/// - the body signed with a non-empty secret verifies, in lowercase (as
///   [`WebhookSecret::sign`] writes it) and in uppercase;
/// - changing one digit of that signature to another hexadecimal digit of a
///   different value fails as [`SignatureError::Mismatch`], to a
///   non-hexadecimal byte as [`SignatureError::Malformed`];
/// - changing one byte of the body fails as [`SignatureError::Mismatch`];
/// - errors are the constant texts of their variants, and `Debug` of the
///   secret is a constant text: neither shows the secret.
///
/// Layout: `[secret length, header length (255: no header), digit index,
/// digit replacement, body index, body mask]`, then the secret, the header
/// and the body (the rest); lengths past the end are cut short.
pub fn webhook_signature(data: &[u8]) {
    let Some((control, rest)) = data.split_at_checked(CONTROL) else {
        return;
    };
    let &[secret_len, header_len, digit_at, replacement, body_at, mask] = control else {
        return;
    };
    let (secret, rest) = rest.split_at(usize::from(secret_len).min(rest.len()));
    let (header, body) = if header_len == u8::MAX {
        (None, rest)
    } else {
        let (header, body) = rest.split_at(usize::from(header_len).min(rest.len()));
        (Some(header), body)
    };

    let key = WebhookSecret::new(secret);
    assert_eq!(
        key.is_none(),
        secret.is_empty(),
        "the empty secret, and only it, is refused"
    );
    let Some(key) = key else {
        // Nothing verifies without a secret.
        arbitrary_header(secret, header, body, None);
        return;
    };
    assert_eq!(format!("{key:?}"), "WebhookSecret(<redacted>)");
    // The reference: RFC 2104's construction over SHA-256, written here, not
    // the `hmac` crate the demo uses.
    let signed = format!("{PREFIX}{}", hex(&reference_hmac(secret, body)));
    assert_eq!(key.sign(body), signed, "secret {secret:?}, body {body:?}");
    arbitrary_header(secret, header, body, Some(&signed));
    signed_header(secret, body, &signed, digit_at, replacement);
    changed_body(secret, body, &signed, body_at, mask);
}

/// An arbitrary header against the reference: its shape, then the digits.
fn arbitrary_header(secret: &[u8], header: Option<&[u8]>, body: &[u8], signed: Option<&str>) {
    let result = verify(secret, header, body);
    let expected = match header {
        None => Err(SignatureError::Missing),
        Some(header) if !well_formed(header) => Err(SignatureError::Malformed),
        Some(header) => match signed {
            Some(signed) if header.eq_ignore_ascii_case(signed.as_bytes()) => Ok(()),
            _ => Err(SignatureError::Mismatch),
        },
    };
    assert_eq!(
        result, expected,
        "secret {secret:?}, header {header:?}, body {body:?}"
    );
    // The errors are unit variants with constant texts: equal to the
    // expected one, they cannot show the secret (a secret that happens to
    // be a piece of that text is not shown by it).
}

/// The body's own signature verifies in either case; one changed digit fails.
fn signed_header(secret: &[u8], body: &[u8], signed: &str, digit_at: u8, replacement: u8) {
    let digits = signed
        .strip_prefix(PREFIX)
        .unwrap_or_else(|| panic!("{signed:?} lacks {PREFIX}"));
    assert_eq!(digits.len(), 64, "{signed:?}");
    assert!(
        digits
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{signed:?} is not lowercase hex"
    );
    assert_eq!(verify(secret, Some(signed.as_bytes()), body), Ok(()));
    let upper = format!("{PREFIX}{}", digits.to_ascii_uppercase());
    assert_eq!(verify(secret, Some(upper.as_bytes()), body), Ok(()));

    let mut changed = signed.as_bytes().to_vec();
    let at = PREFIX.len() + usize::from(digit_at) % 64;
    let old = changed[at];
    changed[at] = replacement;
    let expected = match (value(old), value(replacement)) {
        (Some(a), Some(b)) if a == b => Ok(()),
        (_, Some(_)) => Err(SignatureError::Mismatch),
        (_, None) => Err(SignatureError::Malformed),
    };
    assert_eq!(
        verify(secret, Some(&changed), body),
        expected,
        "digit {at} of {signed:?} changed to {replacement:?}"
    );
}

/// One changed byte of the body fails (an HMAC collision is not a concern).
fn changed_body(secret: &[u8], body: &[u8], signed: &str, body_at: u8, mask: u8) {
    let mut changed = body.to_vec();
    match changed.len() {
        0 => changed.push(mask),
        len => changed[usize::from(body_at) % len] ^= mask.max(1),
    }
    assert_eq!(
        verify(secret, Some(signed.as_bytes()), &changed),
        Err(SignatureError::Mismatch),
        "body {body:?} changed to {changed:?}"
    );
}

/// Whether `header` is `sha256=` and 64 hexadecimal digits, either case.
fn well_formed(header: &[u8]) -> bool {
    header
        .strip_prefix(PREFIX.as_bytes())
        .is_some_and(|digits| digits.len() == 64 && digits.iter().all(|&b| value(b).is_some()))
}

/// The value of a hexadecimal digit, either case.
fn value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// HMAC-SHA256 (RFC 2104): `H((K ^ opad) || H((K ^ ipad) || message))`,
/// the key hashed first when longer than SHA-256's 64-byte block.
fn reference_hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    use sha2::{Digest as _, Sha256};
    let mut block = [0u8; 64];
    if key.len() > block.len() {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
