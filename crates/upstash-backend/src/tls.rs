//! TLS for `https://` endpoints: rustls with the ring provider (the one
//! `tollgate-redis`'s `tls` feature uses), certificates checked by the
//! platform's verifier (on Linux: the system's roots).

use std::sync::Arc;

use crate::Error;

/// The client configuration handed to reqwest, so that no process-wide
/// crypto provider needs installing.
pub(crate) fn config() -> Result<rustls::ClientConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls_platform_verifier::Verifier::new(Arc::clone(&provider))
        .map_err(|err| Error::Client(format!("TLS verifier: {err}")))?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| Error::Client(format!("TLS versions: {err}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
