//! The grid file `ninf up` writes (`DATA_DIR/grid.toml`): where a client finds the grid's
//! proxy, its token and its TLS authority. The C and Python clients take it as their
//! configuration file, so a scientist connects with no argument at all.

use std::path::{Path, PathBuf};

use ninf_proto::net::tls::GridTls;
use serde::Deserialize;

use super::async_client::AsyncGridClient;
use crate::CallError;

/// Environment variable naming a grid file, used when a client names none.
pub const GRID_FILE_ENV: &str = "NINF_GRID";

/// Where `ninf up` keeps its database and writes its grid file unless told otherwise:
/// `$XDG_DATA_HOME/ninf`, `$HOME/.local/share/ninf`, or a folder under the system
/// temporary directory.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("ninf");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".local/share/ninf");
    }
    std::env::temp_dir().join("ninf")
}

/// The grid file a client reads when it names none: the one [`GRID_FILE_ENV`] names, else
/// the one `ninf up` writes by default.
pub fn default_grid_file() -> PathBuf {
    match std::env::var_os(GRID_FILE_ENV).filter(|f| !f.is_empty()) {
        Some(file) => PathBuf::from(file),
        None => default_data_dir().join("grid.toml"),
    }
}

/// Why a grid file cannot be used; the C client maps these to `GRPC_CONFIGFILE_NOT_FOUND`
/// and `GRPC_CONFIGFILE_ERROR`.
#[derive(Debug, thiserror::Error)]
pub enum GridFileError {
    #[error("no grid file at {path} (start a grid with `ninf up`, or name its grid.toml)")]
    NotFound { path: PathBuf },
    #[error("cannot read the grid file {path}: {source}")]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a grid file: {reason}")]
    Malformed { path: PathBuf, reason: String },
}

/// What a client needs from a grid file (the rest of it is for the grid's own tools).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GridFile {
    /// The client proxy, `host:port`.
    pub proxy: String,
    /// The file holding the grid's token, when clients must present one.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The folder of the grid's TLS material (`ca.pem` in it), when it runs over TLS.
    #[serde(default)]
    pub tls_dir: Option<PathBuf>,
}

impl GridFile {
    /// Reads and checks a grid file.
    pub fn read(path: &Path) -> Result<GridFile, GridFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                GridFileError::NotFound {
                    path: path.to_path_buf(),
                }
            } else {
                GridFileError::Unreadable {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
        GridFile::parse(&text).map_err(|reason| GridFileError::Malformed {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// A grid file's text, checked.
    pub fn parse(text: &str) -> Result<GridFile, String> {
        let file: GridFile = toml::from_str(text).map_err(|e| e.to_string())?;
        if file.proxy.trim().is_empty() {
            return Err("`proxy` is empty".into());
        }
        Ok(file)
    }

    /// The grid's token, if it has one.
    pub fn token(&self) -> Result<Option<String>, CallError> {
        self.token_file
            .as_deref()
            .map(|path| {
                ninf_proto::net::auth::load_token(path)
                    .map_err(|e| CallError::bad_argument(e.to_string()))
            })
            .transpose()
    }

    /// The grid's authority to check the proxy against, if it runs over TLS.
    pub fn tls(&self) -> Result<Option<GridTls>, CallError> {
        self.tls_dir
            .as_deref()
            .map(|dir| {
                GridTls::trusting(&dir.join("ca.pem"))
                    .map_err(|e| CallError::bad_argument(e.to_string()))
            })
            .transpose()
    }

    /// Connects to the grid's proxy with its token and TLS authority.
    pub async fn connect(&self) -> Result<AsyncGridClient, CallError> {
        let client = AsyncGridClient::connect_with_tls(&self.proxy, self.tls()?.as_ref()).await?;
        Ok(match self.token()? {
            Some(token) => client.with_token(&token),
            None => client,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_file_gives_the_proxy_token_and_tls_folder_and_ignores_the_rest() {
        let text = r#"
            metaserver = "127.0.0.1:1"
            proxy = "127.0.0.1:2"
            servers = ["127.0.0.1:3"]
            pid = 7
            token_file = "/tmp/grid/token"
            [metrics]
            proxy = "127.0.0.1:4"
        "#;
        let file = GridFile::parse(text).unwrap();
        assert_eq!(file.proxy, "127.0.0.1:2");
        assert_eq!(file.token_file, Some(PathBuf::from("/tmp/grid/token")));
        assert_eq!(file.tls_dir, None);
    }

    #[test]
    fn a_missing_or_malformed_grid_file_says_which_and_where() {
        let missing = Path::new("/nonexistent/ninf/grid.toml");
        let e = GridFile::read(missing).unwrap_err();
        assert!(matches!(e, GridFileError::NotFound { .. }), "{e}");
        assert!(e.to_string().contains("/nonexistent/ninf/grid.toml"), "{e}");
        assert!(GridFile::parse("proxy = ").unwrap_err().contains("line 1"));
        assert!(
            GridFile::parse("metaserver = \"x\"")
                .unwrap_err()
                .contains("proxy")
        );
        assert!(
            GridFile::parse("proxy = \" \"")
                .unwrap_err()
                .contains("empty")
        );
    }
}
