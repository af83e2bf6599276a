//! TLS for a listener: a certificate chain and its key, PEM files read
//! and checked when the config is validated (so a wrong path or a key
//! that is not a key is a config error naming its key, not a failure
//! inside pingora), then handed to pingora's rustls listener (and to
//! tonic's, for the joiner's gRPC receiver).

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};

/// A listener's certificate chain and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// Both files read and parsed: at least one certificate, one key.
    pub fn check(cert: &Path, key: &Path) -> Result<TlsFiles, String> {
        let certs: Vec<_> = CertificateDer::pem_file_iter(cert)
            .map_err(|e| format!("{}: {e}", cert.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}: {e}", cert.display()))?;
        if certs.is_empty() {
            return Err(format!("{}: no certificate", cert.display()));
        }
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
        Ok(TlsFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        })
    }

    /// The two files' contents (tonic takes PEM bytes).
    pub fn read(&self) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
        Ok((std::fs::read(&self.cert)?, std::fs::read(&self.key)?))
    }
}
