//! A list of metaservers, of which one answers at a time: compute servers and proxies keep a
//! connection to each and move to the next when the one they use is unreachable or says it
//! is a standby. The list is written `host:port,host:port` wherever one address was.

use std::sync::atomic::{AtomicUsize, Ordering};

use tonic::transport::Channel;

use super::tls::GridTls;
use super::{ConnectionSettings, NetError};

/// Lazy connections to every address of a list, and the one in use.
#[derive(Debug)]
pub struct Failover {
    targets: Vec<(String, Channel)>,
    current: AtomicUsize,
}

/// The addresses of a list: `a:1,b:2` (spaces allowed around each).
pub fn addresses(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether a failed request should go to the next address: the metaserver was unreachable,
/// or it answered as a standby (UNAVAILABLE either way; a broken connection can surface as
/// UNKNOWN). A metaserver killed while it held the request makes the connection end under
/// it, which hyper reports as CANCELLED ("operation was canceled") or an h2 INTERNAL: those
/// count too when they come from the transport, not from a status the metaserver sent.
pub fn try_next(status: &tonic::Status) -> bool {
    match status.code() {
        tonic::Code::Unavailable | tonic::Code::Unknown => true,
        tonic::Code::Cancelled | tonic::Code::Internal => from_transport(status),
        _ => false,
    }
}

/// Whether `status` was made on this side from a transport error: a status decoded from the
/// peer's trailers carries no source error.
fn from_transport(status: &tonic::Status) -> bool {
    std::error::Error::source(status).is_some()
}

impl Failover {
    /// Lazy connections to every address of `list`; an error names a bad one, or an empty
    /// list.
    pub fn connect_lazy(
        list: &str,
        tls: Option<&GridTls>,
        settings: ConnectionSettings,
    ) -> Result<Failover, NetError> {
        let addresses = addresses(list);
        if addresses.is_empty() {
            return Err(NetError::BadAddress {
                address: list.to_string(),
                reason: "no address in the list".into(),
            });
        }
        let targets = addresses
            .into_iter()
            .map(|a| super::connect_lazy(&a, tls, settings).map(|c| (a, c)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Failover {
            targets,
            current: AtomicUsize::new(0),
        })
    }

    /// The connection in use, and its place in the list (for [`Self::failed`]).
    pub fn channel(&self) -> (usize, Channel) {
        let index = self.current.load(Ordering::SeqCst) % self.targets.len();
        (index, self.targets[index].1.clone())
    }

    /// The address in use.
    pub fn address(&self) -> &str {
        let index = self.current.load(Ordering::SeqCst) % self.targets.len();
        &self.targets[index].0
    }

    pub fn len(&self) -> usize {
        self.targets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// The connection at `index` failed: the next in the list is used from now on. Requests
    /// that failed together on one address move the list on once.
    pub fn failed(&self, index: usize) {
        let next = (index + 1) % self.targets.len();
        if self
            .current
            .compare_exchange(index, next, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
            && self.targets.len() > 1
        {
            tracing::warn!(
                from = %self.targets[index].0,
                to = %self.targets[next].0,
                "moving to the next metaserver"
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failure_moves_the_list_on_once_and_wraps_around() {
        let list = Failover::connect_lazy(
            " 127.0.0.1:1, 127.0.0.1:2,,",
            None,
            ConnectionSettings::default(),
        )
        .unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list.address(), "127.0.0.1:1");
        let (first, _) = list.channel();
        list.failed(first);
        // A second request that failed on the same address does not skip the next one.
        list.failed(first);
        assert_eq!(list.address(), "127.0.0.1:2");
        list.failed(list.channel().0);
        assert_eq!(list.address(), "127.0.0.1:1");
        let empty = Failover::connect_lazy(" , ", None, ConnectionSettings::default());
        assert!(
            empty
                .unwrap_err()
                .to_string()
                .contains("no address in the list")
        );
    }

    /// An error whose cause is `status`, the way hyper's errors reach tonic.
    #[derive(Debug)]
    struct Broken(tonic::Status);

    impl std::fmt::Display for Broken {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "connection broke")
        }
    }

    impl std::error::Error for Broken {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_connection_ended_under_a_request_moves_on_and_a_metaservers_own_refusal_does_not() {
        let broken = |status| tonic::Status::from_error(Box::new(Broken(status)));
        let canceled = broken(tonic::Status::cancelled("operation was canceled"));
        assert_eq!(canceled.code(), tonic::Code::Cancelled);
        assert!(try_next(&canceled));
        assert!(try_next(&broken(tonic::Status::internal(
            "h2 protocol error"
        ))));
        assert!(try_next(&tonic::Status::unavailable("standby")));
        assert!(try_next(&tonic::Status::unknown("transport error")));
        // The same codes sent by a metaserver are its answer, final.
        assert!(!try_next(&tonic::Status::cancelled(
            "canceled by the metaserver"
        )));
        assert!(!try_next(&tonic::Status::internal("database error")));
        assert!(!try_next(&tonic::Status::invalid_argument(
            "no such routine"
        )));
    }
}
