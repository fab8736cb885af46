//! TLS setup for `rediss://` (the `tls` feature).

/// Gives rustls a process-level crypto provider before the first TLS
/// connection. rustls picks one from its crate features only when exactly
/// one is enabled; an application that also builds another (reqwest's
/// default aws-lc-rs, tollgate's own Upstash store) would otherwise panic
/// in its first `rediss://` connection. Installs ring unless the
/// application installed a provider of its own first.
#[cfg(feature = "tls")]
pub(crate) fn provide() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one first; either is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Without the `tls` feature no URL asks for TLS.
#[cfg(not(feature = "tls"))]
pub(crate) fn provide() {}
