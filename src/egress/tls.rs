//! TLS for https calls: the system's roots plus the operator's CA file
//! (`sutra.egress.ca-file`, PEM), rustls on ring, HTTP/1.1 only.
//!
//! Invariant: a certificate is verified against those roots and the host
//! name the request named (never the address it was connected to); a
//! missing or unreadable CA file is refused at start, not at the first call.

use std::sync::{Arc, OnceLock};

/// The TLS client configuration of an egress service.
///
/// The system's roots are read at the first https call, not at start: a
/// runtime whose tasks never call out (deny-all, the default) does not pay
/// for reading them (~8 ms per runtime on the machines of benches/README.md
/// "Engine → Session 28", which every `sutra run` paid at start).
#[derive(Clone)]
pub struct Tls {
    /// The operator's CA file's certificates, checked at start.
    operator: Arc<rustls::RootCertStore>,
    connector: Arc<OnceLock<Result<tokio_rustls::TlsConnector, String>>>,
}

impl Tls {
    /// The certificates of `ca_file` now; the system's roots (those it has;
    /// none is not an error) at the first call.
    pub fn new(ca_file: Option<&std::path::Path>) -> Result<Tls, String> {
        use rustls::pki_types::pem::PemObject;
        let mut operator = rustls::RootCertStore::empty();
        if let Some(path) = ca_file {
            let mut n = 0;
            for cert in rustls::pki_types::CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            {
                let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
                operator
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                n += 1;
            }
            if n == 0 {
                return Err(format!("{} holds no PEM certificate", path.display()));
            }
        }
        Ok(Tls {
            operator: Arc::new(operator),
            connector: Arc::new(OnceLock::new()),
        })
    }

    /// The connector over the system's roots and the operator's, built once.
    fn connector(&self) -> Result<&tokio_rustls::TlsConnector, String> {
        self.connector
            .get_or_init(|| {
                let mut roots = (*self.operator).clone();
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(cert);
                }
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let mut config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The TLS handshake with `host` over a connected stream.
    pub async fn connect(
        &self,
        host: &str,
        stream: tokio::net::TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("`{host}` is not a TLS server name: {e}"))?;
        self.connector()?
            .connect(name, stream)
            .await
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_ca_file_is_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = Tls::new(Some(&missing))
            .err()
            .expect("a missing file is refused");
        assert!(e.starts_with("cannot read"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = Tls::new(Some(&empty))
            .err()
            .expect("a file without certificates is refused");
        assert!(e.contains("holds no PEM certificate"), "{e}");
    }

    #[test]
    fn the_system_roots_are_read_at_the_first_call_only() {
        let tls = Tls::new(None).unwrap();
        let copy = tls.clone();
        assert!(tls.connector.get().is_none(), "nothing read at start");
        assert!(copy.connector().is_ok());
        assert!(tls.connector.get().is_some(), "clones share the connector");
    }
}
