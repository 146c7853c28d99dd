//! The release every program of the grid is built from, and which releases work together.
//! Every outgoing request carries its sender's release as `ninf-version` metadata
//! ([`crate::net::auth::AttachToken`]); every service checks it before anything else
//! ([`crate::net::auth::CheckToken`]) and refuses a release it cannot work with, naming both.
//! A request without it (grpcurl, a health probe) is let through.

use tonic::Status;

/// This program's release: the workspace's one version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The metadata key carrying the sender's release.
pub const HEADER: &str = "ninf-version";

/// The part of a release that must agree: the major number, and before 1.0 the minor one
/// too (semantic versioning's promise).
fn series(version: &str) -> Option<(u64, u64)> {
    let mut parts = version.split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some(if major == 0 { (0, minor) } else { (major, 0) })
}

/// Whether programs of releases `a` and `b` work together.
pub fn compatible(a: &str, b: &str) -> bool {
    matches!((series(a), series(b)), (Some(x), Some(y)) if x == y)
}

/// Refuses a request whose sender announced a release this `service` (named for the
/// message: "compute server", "proxy", "metaserver") cannot work with.
pub fn check(announced: Option<&[u8]>, service: &str) -> Result<(), Status> {
    let Some(announced) = announced else {
        return Ok(());
    };
    let announced = String::from_utf8_lossy(announced);
    if compatible(&announced, VERSION) {
        return Ok(());
    }
    Err(Status::permission_denied(format!(
        "the caller runs ninf {announced} and this {service} runs ninf {VERSION}; these releases \
         do not work together: run the same release on both sides"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_of_one_series_work_together_and_others_are_refused_by_name() {
        assert!(compatible("0.1.0", "0.1.7"));
        assert!(compatible("1.2.0", "1.9.3-rc1"));
        assert!(!compatible("0.1.0", "0.2.0"));
        assert!(!compatible("1.0.0", "2.0.0"));
        assert!(!compatible("garbage", VERSION));
        assert!(check(None, "proxy").is_ok());
        assert!(check(Some(VERSION.as_bytes()), "proxy").is_ok());
        let refused = check(Some(b"9.0.0"), "compute server").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            refused.message(),
            format!(
                "the caller runs ninf 9.0.0 and this compute server runs ninf {VERSION}; these \
                 releases do not work together: run the same release on both sides"
            )
        );
    }
}
