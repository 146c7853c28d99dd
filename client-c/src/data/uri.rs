//! GFD.186's URIs as this library reads them (grpc_data.h): where a value comes from or goes
//! to. Pure parsing, no I/O.

use std::path::PathBuf;

/// A place a value can be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// `memory://localhost/KEY`: client memory named by `grpc_data_memory_mapping_set`.
    Memory(String),
    /// `file:///PATH`: a file of the array's raw bytes.
    File(PathBuf),
    /// `ninf://grid` (kept on a server the grid chooses) or `ninf://grid/ID` (the data kept
    /// under handle ID).
    Grid(Option<String>),
}

/// Reads `uri`, or says what is wrong with it.
pub fn parse(uri: &str) -> Result<Location, String> {
    let (scheme, rest) = uri
        .split_once("://")
        .ok_or_else(|| format!("`{uri}` is not a URI (scheme://...): {SCHEMES}"))?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    match scheme {
        "memory" => {
            if !matches!(host, "" | "localhost") {
                return Err(format!(
                    "`{uri}`: memory:// names this client's memory, so its host must be \
                     localhost, not `{host}`"
                ));
            }
            if path.is_empty() {
                return Err(format!("`{uri}` names no key (memory://localhost/KEY)"));
            }
            Ok(Location::Memory(path.to_string()))
        }
        "file" => {
            if !matches!(host, "" | "localhost") || path.is_empty() {
                return Err(format!(
                    "`{uri}`: a file URI is file:///ABSOLUTE/PATH (a file on this client)"
                ));
            }
            Ok(Location::File(PathBuf::from(format!("/{path}"))))
        }
        "ninf" => {
            if host != "grid" {
                return Err(format!(
                    "`{uri}`: data is kept on the grid as a whole (ninf://grid or \
                     ninf://grid/ID), not on a server named `{host}`"
                ));
            }
            Ok(Location::Grid((!path.is_empty()).then(|| path.to_string())))
        }
        other => Err(format!(
            "`{uri}`: the scheme `{other}` is not supported; {SCHEMES}"
        )),
    }
}

const SCHEMES: &str = "use memory://localhost/KEY, file:///PATH, ninf://grid or ninf://grid/ID";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_schemes_are_read_and_others_refused_naming_the_uri() {
        assert_eq!(
            parse("memory://localhost/A"),
            Ok(Location::Memory("A".into()))
        );
        assert_eq!(parse("memory:///A"), Ok(Location::Memory("A".into())));
        assert_eq!(
            parse("file:///tmp/a.bin"),
            Ok(Location::File("/tmp/a.bin".into()))
        );
        assert_eq!(parse("ninf://grid"), Ok(Location::Grid(None)));
        assert_eq!(
            parse("ninf://grid/abc"),
            Ok(Location::Grid(Some("abc".into())))
        );
        assert!(
            parse("ftp://x/y")
                .unwrap_err()
                .contains("`ftp` is not supported")
        );
        assert!(
            parse("memory://other/A")
                .unwrap_err()
                .contains("must be localhost")
        );
        assert!(
            parse("memory://localhost/")
                .unwrap_err()
                .contains("names no key")
        );
        assert!(
            parse("ninf://server:1/x")
                .unwrap_err()
                .contains("`server:1`")
        );
        assert!(parse("A").unwrap_err().contains("is not a URI"));
    }
}
