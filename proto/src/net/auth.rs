//! The grid's shared secret: a token that `ninf up` generates and stores with mode 0600, that
//! compute servers present to the metaserver, the proxy presents to the metaserver, and
//! clients present to the proxy, as `authorization: Bearer <token>` request metadata. A
//! service configured with a token refuses every request without it, with UNAUTHENTICATED,
//! and logs the refusal; a service configured without one accepts everyone (a private
//! loopback grid). The same interceptors carry and check the sender's release
//! ([`crate::version`]).

use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

/// The metadata key carrying the token.
const HEADER: &str = "authorization";

/// A channel whose every request carries the grid's token (when there is one).
pub type Authorized = InterceptedService<Channel, AttachToken>;

/// `channel`, presenting `token` with every request.
pub fn authorized(channel: Channel, token: &AttachToken) -> Authorized {
    InterceptedService::new(channel, token.clone())
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the token file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the token file {path} can be read by others (mode {mode:o}); make it private with `chmod 600 {path}`"
    )]
    Exposed { path: String, mode: u32 },
    #[error("the token file {path} must hold 16 to 256 printable ASCII characters")]
    Malformed { path: String },
    #[error("cannot create the token file {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// Reads a token file, refusing one that group or others may read.
pub fn load_token(path: &Path) -> Result<String, TokenError> {
    let shown = path.display().to_string();
    let metadata = std::fs::metadata(path).map_err(|source| TokenError::Read {
        path: shown.clone(),
        source,
    })?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(TokenError::Exposed { path: shown, mode });
    }
    let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
        path: shown.clone(),
        source,
    })?;
    let token = text.trim();
    let printable = token.bytes().all(|b| b.is_ascii_graphic());
    if !(16..=256).contains(&token.len()) || !printable {
        return Err(TokenError::Malformed { path: shown });
    }
    Ok(token.to_string())
}

/// The token of a configured file (`None`: no token configured, an open service).
pub fn load_configured(path: Option<&Path>) -> Result<Option<String>, TokenError> {
    path.map(load_token).transpose()
}

/// Creates a fresh random token (32 bytes from the kernel, as hex) in a new file of mode
/// 0600 at `path`, replacing an old one; returns it.
pub fn generate_token(path: &Path) -> Result<String, TokenError> {
    let write_error = |source| TokenError::Write {
        path: path.display().to_string(),
        source,
    };
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(write_error)?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(write_error)?;
    std::io::Write::write_all(&mut file, format!("{token}\n").as_bytes()).map_err(write_error)?;
    Ok(token)
}

/// Adds the token to every outgoing request (nothing when there is none), and the caller's
/// trace context when traces are on.
#[derive(Clone, Default, Debug)]
pub struct AttachToken(Option<Arc<MetadataValue<Ascii>>>);

impl AttachToken {
    /// `None`: requests go out without credentials.
    pub fn new(token: Option<&str>) -> AttachToken {
        AttachToken(
            token
                .and_then(|t| format!("Bearer {t}").parse().ok())
                .map(Arc::new),
        )
    }
}

impl AttachToken {
    /// The `authorization` value, for transports without request metadata (the bulk-data
    /// connection carries it in each `CallRequest`); empty when there is no token.
    pub fn header(&self) -> String {
        self.0
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    }
}

impl Interceptor for AttachToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request.metadata_mut().insert(
            crate::version::HEADER,
            MetadataValue::from_static(crate::version::VERSION),
        );
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert(HEADER, value.as_ref().clone());
        }
        super::trace::inject(request.metadata_mut());
        Ok(request)
    }
}

/// Refuses requests that do not carry the expected token (accepts all when there is none).
#[derive(Clone)]
pub struct CheckToken {
    expected: Option<Arc<String>>,
    /// Which service refuses, for the log.
    service: &'static str,
}

impl CheckToken {
    pub fn new(service: &'static str, token: Option<&str>) -> CheckToken {
        CheckToken {
            expected: token.map(|t| Arc::new(format!("Bearer {t}"))),
            service,
        }
    }
}

/// Compares without stopping at the first difference, so timing does not reveal how much
/// of a guess was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl CheckToken {
    /// Whether a service with this check accepts everyone.
    pub fn is_open(&self) -> bool {
        self.expected.is_none()
    }

    /// Checks an `authorization` value (`None`: the request had none) from `peer`.
    pub fn verify(&self, given: Option<&[u8]>, peer: &str) -> Result<(), Status> {
        let Some(expected) = &self.expected else {
            return Ok(());
        };
        if given.is_some_and(|g| same(g, expected.as_bytes())) {
            return Ok(());
        }
        let reason = if given.is_some() {
            "a wrong grid token"
        } else {
            "no grid token"
        };
        tracing::warn!(service = self.service, %peer, reason, "refused an unauthenticated request");
        Err(Status::unauthenticated(format!(
            "the {} refuses requests with {reason}; pass the grid's token (the `token` file `ninf up` wrote)",
            self.service
        )))
    }
}

impl Interceptor for CheckToken {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let announced = request.metadata().get(crate::version::HEADER);
        crate::version::check(announced.map(|v| v.as_bytes()), self.service)?;
        if self.is_open() {
            return Ok(request);
        }
        let given = request.metadata().get(HEADER).map(|v| v.as_bytes());
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown".to_string(), |a| a.to_string());
        self.verify(given, &peer)?;
        Ok(request)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("ninf-auth-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_generated_token_is_private_and_loads_back() {
        let path = dir("gen").join("token");
        let token = generate_token(&path).unwrap();
        assert_eq!(token.len(), 64);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_token(&path).unwrap(), token);
        assert_ne!(
            generate_token(&path).unwrap(),
            token,
            "a new grid, a new token"
        );
    }

    #[test]
    fn exposed_or_malformed_token_files_are_refused_by_name() {
        let path = dir("bad").join("token");
        std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_token(&path).unwrap_err().to_string();
        assert!(e.contains("can be read by others (mode 644)"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(load_token(&path).is_ok());
        std::fs::write(&path, "short\n").unwrap();
        let e = load_token(&path).unwrap_err().to_string();
        assert!(e.contains("16 to 256 printable"), "{e}");
    }

    #[test]
    fn only_requests_with_the_token_pass() {
        let mut check = CheckToken::new("metaserver", Some("0123456789abcdef"));
        let bare = check.call(Request::new(())).unwrap_err();
        assert_eq!(bare.code(), tonic::Code::Unauthenticated);
        assert!(
            bare.message().contains("no grid token"),
            "{}",
            bare.message()
        );
        let mut wrong = AttachToken::new(Some("0123456789abcdeX"));
        let e = check
            .call(wrong.call(Request::new(())).unwrap())
            .unwrap_err();
        assert!(
            e.message().contains("a wrong grid token"),
            "{}",
            e.message()
        );
        let mut right = AttachToken::new(Some("0123456789abcdef"));
        assert!(check.call(right.call(Request::new(())).unwrap()).is_ok());
        // The same value outside gRPC (the bulk-data connection).
        assert!(
            check
                .verify(Some(right.header().as_bytes()), "peer")
                .is_ok()
        );
        assert!(check.verify(None, "peer").is_err());
        assert_eq!(AttachToken::new(None).header(), "");
        // Without a configured token everyone passes.
        let mut open = CheckToken::new("proxy", None);
        assert!(open.call(Request::new(())).is_ok());
    }
}
