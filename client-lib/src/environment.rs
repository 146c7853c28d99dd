//! What a client takes from its environment: the grid's token file and TLS material, named
//! by the variables `ninf up` prints.

use ninf_proto::net::auth::AttachToken;
use ninf_proto::net::tls::GridTls;

use crate::CallError;

/// Environment variable naming the grid's token file; read by [`crate::GridClient::connect`] and
/// [`crate::NinfClient::connect`].
pub const TOKEN_FILE_ENV: &str = "NINF_TOKEN_FILE";

/// Environment variable naming the grid's certificate authority (PEM): clients connect over
/// TLS and check servers against it. [`TLS_CERTIFICATE_ENV`] and [`TLS_KEY_ENV`] add a
/// client certificate, which compute servers require when called directly.
pub const TLS_CA_ENV: &str = "NINF_TLS_CA";
pub const TLS_CERTIFICATE_ENV: &str = "NINF_TLS_CERTIFICATE";
pub const TLS_KEY_ENV: &str = "NINF_TLS_KEY";

/// Environment variable: seconds a client keeps sending a transaction again while its proxy
/// is unreachable (it died and restarts; the restarted proxy finishes the transaction from
/// its journal). Default [`DEFAULT_RECONNECT_SECONDS`]; 0 fails at once.
pub const RECONNECT_SECONDS_ENV: &str = "NINF_RECONNECT_SECONDS";

/// How long a client waits for its proxy to come back, unless [`RECONNECT_SECONDS_ENV`] says.
pub const DEFAULT_RECONNECT_SECONDS: f64 = 60.0;

/// Environment variable: `off` keeps a client on the proxy's host from passing its large
/// arrays in memory shared with the proxy (docs/bulk-protocol.md); every array then goes in
/// the request, as from another host. Default `on`.
pub const SAME_HOST_UPLOADS_ENV: &str = "NINF_SAME_HOST_UPLOADS";

/// Whether the environment lets a client share memory with its proxy; a bad value is an
/// error naming it.
pub(crate) fn same_host_uploads_from_env() -> Result<bool, CallError> {
    let Some(value) = std::env::var_os(SAME_HOST_UPLOADS_ENV) else {
        return Ok(true);
    };
    let text = value.to_string_lossy();
    match text.trim() {
        "on" | "" => Ok(true),
        "off" => Ok(false),
        _ => Err(CallError::bad_argument(format!(
            "{SAME_HOST_UPLOADS_ENV} is `{text}`; it must be `on` or `off`"
        ))),
    }
}

/// The reconnect window the environment sets, or the default; a bad value is an error
/// naming it.
pub(crate) fn reconnect_from_env() -> Result<std::time::Duration, CallError> {
    let Some(value) = std::env::var_os(RECONNECT_SECONDS_ENV) else {
        return Ok(std::time::Duration::from_secs_f64(
            DEFAULT_RECONNECT_SECONDS,
        ));
    };
    let text = value.to_string_lossy();
    match text.trim().parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds >= 0.0 => {
            Ok(std::time::Duration::from_secs_f64(seconds))
        }
        _ => Err(CallError::bad_argument(format!(
            "{RECONNECT_SECONDS_ENV} is `{text}`; it must be a number of seconds, 0 or more"
        ))),
    }
}

/// The TLS material the environment names, if it names an authority.
pub(crate) fn tls_from_env() -> Result<Option<GridTls>, CallError> {
    let Some(ca) = std::env::var_os(TLS_CA_ENV) else {
        return Ok(None);
    };
    let ca = std::path::PathBuf::from(ca);
    let loaded = match (
        std::env::var_os(TLS_CERTIFICATE_ENV),
        std::env::var_os(TLS_KEY_ENV),
    ) {
        (Some(certificate), Some(key)) => GridTls::load(&ninf_proto::net::tls::TlsFiles {
            ca,
            certificate: certificate.into(),
            key: key.into(),
            require_client_certificates: true,
        }),
        (None, None) => GridTls::trusting(&ca),
        _ => {
            return Err(CallError::bad_argument(format!(
                "set both {TLS_CERTIFICATE_ENV} and {TLS_KEY_ENV}, or neither"
            )));
        }
    };
    loaded
        .map(Some)
        .map_err(|e| CallError::bad_argument(e.to_string()))
}

/// The token in the file [`TOKEN_FILE_ENV`] names, if it names one.
pub(crate) fn token_from_env() -> Result<AttachToken, CallError> {
    let token = match std::env::var_os(TOKEN_FILE_ENV) {
        Some(path) => Some(
            ninf_proto::net::auth::load_token(std::path::Path::new(&path))
                .map_err(|e| CallError::bad_argument(e.to_string()))?,
        ),
        None => None,
    };
    Ok(AttachToken::new(token.as_deref()))
}
