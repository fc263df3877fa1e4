//! TLS for https calls: the system's roots plus the operator's CA file
//! (`sutra.egress.ca-file`, PEM), rustls on ring, HTTP/1.1 only.
//!
//! Invariant: a certificate is verified against those roots and the host
//! name the request named (never the address it was connected to); a
//! missing or unreadable CA file is refused at start, not at the first call.

use std::sync::Arc;

/// The TLS client configuration of an egress service.
#[derive(Clone)]
pub struct Tls {
    connector: tokio_rustls::TlsConnector,
}

impl Tls {
    /// The system's roots (those it has; none is not an error) plus the
    /// certificates of `ca_file`.
    pub fn new(ca_file: Option<&std::path::Path>) -> Result<Tls, String> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        if let Some(path) = ca_file {
            let mut n = 0;
            for cert in rustls::pki_types::CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            {
                let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                n += 1;
            }
            if n == 0 {
                return Err(format!("{} holds no PEM certificate", path.display()));
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// The TLS handshake with `host` over a connected stream.
    pub async fn connect(
        &self,
        host: &str,
        stream: tokio::net::TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("`{host}` is not a TLS server name: {e}"))?;
        self.connector
            .connect(name, stream)
            .await
            .map_err(|e| e.to_string())
    }
}
