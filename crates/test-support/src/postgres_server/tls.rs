//! [`Certificates`]: a certificate authority made for one test and a
//! server certificate it signed, as PEM files.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// A CA of the test's own and a server certificate it signed, written as
/// PEM files in a directory: `ca.pem`, `server.pem` and `server.key`.
///
/// ```no_run
/// use tollgate_test_support::postgres_server::Certificates;
/// let dir = tempfile::tempdir().unwrap();
/// let other = Certificates::make(dir.path(), &["localhost", "127.0.0.1"]);
/// let url = format!("postgres://db/x?sslmode=verify-full&sslrootcert={}", other.ca.display());
/// # let _ = url;
/// ```
#[derive(Clone, Debug)]
pub struct Certificates {
    /// The CA's certificate: what a client given it (`sslrootcert=`) trusts.
    pub ca: PathBuf,
    /// The server's certificate, signed by the CA.
    pub cert: PathBuf,
    /// The server certificate's private key.
    pub key: PathBuf,
}

impl Certificates {
    /// Makes a new CA, and a server certificate valid for `names` (host
    /// names, or IP addresses such as `127.0.0.1`), in `dir`.
    ///
    /// # Panics
    ///
    /// When a certificate cannot be made or a file cannot be written.
    pub fn make(dir: &Path, names: &[&str]) -> Certificates {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let (ca, ca_key) = {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap_or_else(fail);
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(
                DnType::CommonName,
                format!("tollgate test CA {}", crate::unique()),
            );
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            let key = KeyPair::generate().unwrap_or_else(fail);
            (params.self_signed(&key).unwrap_or_else(fail), key)
        };
        let mut params = CertificateParams::new(names.clone()).unwrap_or_else(fail);
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().map_or("server", String::as_str),
        );
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().unwrap_or_else(fail);
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap_or_else(fail);
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let certificates = Certificates {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
        };
        write(&certificates.ca, &ca.pem());
        write(&certificates.cert, &cert.pem());
        write(&certificates.key, &key.serialize_pem());
        certificates
    }
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

fn fail<T>(e: rcgen::Error) -> T {
    panic!("cannot make a test certificate: {e}")
}
