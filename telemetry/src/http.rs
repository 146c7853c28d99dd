//! The services' HTTP endpoints (metrics, the metaserver's dashboard): an axum router served
//! on the service's own runtime, over plain TCP or over TLS with the grid's certificate.
//!
//! Connections are served one task each and aborted on stop, rather than drained: a
//! dashboard holds a server-sent event stream open for as long as its page is open, and a
//! service that stops must not wait for a browser tab to close.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use ninf_proto::net::NetError;
use ninf_proto::net::tls::{GridTls, TlsFiles};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP endpoint serving in this process; dropping it stops it.
pub struct HttpEndpoint {
    /// The address it listens on (`host:port`).
    pub address: String,
    /// Whether it serves HTTPS.
    pub https: bool,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpEndpoint {
    /// `http://address` or `https://address`.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.address)
    }

    /// Stops serving (open connections are closed) and waits until it has.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for HttpEndpoint {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The TLS setting of an HTTPS endpoint from a component's `[tls]` files: it presents the
/// component's certificate (signed by the grid's authority), so a browser that trusts the
/// authority, or is told to, can check it.
#[derive(Debug, thiserror::Error)]
pub enum HttpsError {
    #[error(transparent)]
    Files(#[from] ninf_proto::net::tls::TlsError),
    #[error("{path}: {reason}")]
    Pem { path: String, reason: String },
    #[error("TLS setting refused: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A rustls server configuration from a component's certificate and key.
pub fn https_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, HttpsError> {
    // Checks the files as the gRPC side does (PEM, a key only its owner can read).
    GridTls::load(files)?;
    let pem_error = |path: &std::path::Path, e: &dyn std::fmt::Display| HttpsError::Pem {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let certificates = CertificateDer::pem_file_iter(&files.certificate)
        .map_err(|e| pem_error(&files.certificate, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(&files.certificate, &e))?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| pem_error(&files.key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certificates, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `app` on `listen` (port 0 picks a free one), over TLS when `tls` is given.
pub async fn serve_router(
    listen: &str,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Result<HttpEndpoint, NetError> {
    let listener = ninf_proto::net::listen(listen).await?;
    let address = listener
        .local_addr()
        .map_err(|e| NetError::Listen {
            address: listen.to_string(),
            reason: e.to_string(),
        })?
        .to_string();
    let https = tls.is_some();
    let acceptor = tls.map(TlsAcceptor::from);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(accept_loop(listener, app, acceptor, stopped));
    Ok(HttpEndpoint {
        address,
        https,
        stop: Some(stop),
        task,
    })
}

async fn accept_loop(
    listener: TcpListener,
    app: Router,
    acceptor: Option<TlsAcceptor>,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(connection(stream, app.clone(), acceptor.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept an HTTP connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            // Reaps finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

async fn connection(stream: TcpStream, app: Router, acceptor: Option<TlsAcceptor>) {
    let service = TowerToHyperService::new(app);
    let http = hyper::server::conn::http1::Builder::new();
    let result = match acceptor {
        None => {
            http.serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await
        }
        Some(acceptor) => {
            let stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => return tracing::debug!(error = %e, "TLS handshake failed"),
                    Err(_) => return tracing::debug!("TLS handshake timed out"),
                };
            http.serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "HTTP connection ended with an error");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::routing::get;
    use rustls_pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn https_presents_the_components_certificate_from_the_grids_authority() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = ["127.0.0.1".to_string()];
        ninf_proto::net::tls::generate(dir.path(), &["metaserver"], &hosts).unwrap();
        let files = ninf_proto::net::tls::files_in(dir.path(), "metaserver", true);
        let app = Router::new().route("/", get(|| async { "over TLS" }));
        let endpoint = serve_router("127.0.0.1:0", app, Some(https_config(&files).unwrap()))
            .await
            .unwrap();
        assert!(endpoint.url().starts_with("https://127.0.0.1:"));

        let mut roots = rustls::RootCertStore::empty();
        let ca = CertificateDer::from_pem_file(dir.path().join("ca.pem")).unwrap();
        roots.add(ca).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let tcp = TcpStream::connect(&endpoint.address).await.unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut tls = connector.connect(name, tcp).await.unwrap();
        tls.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = Vec::new();
        let _ = tls.read_to_end(&mut response).await;
        let response = String::from_utf8_lossy(&response);
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.ends_with("over TLS"), "{response}");

        // A plain-text request to the HTTPS port gets no page.
        let mut plain = TcpStream::connect(&endpoint.address).await.unwrap();
        plain
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let _ = plain.read_to_end(&mut answer).await;
        assert!(!String::from_utf8_lossy(&answer).contains("over TLS"));
        endpoint.stop().await;
    }
}
