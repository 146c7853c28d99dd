//! The signal every Ninf service binary stops on: Ctrl-C (SIGINT) or SIGTERM, whichever comes
//! first, so `kill` and a terminal stop servers the same graceful way.

/// Completes when the process gets SIGINT or SIGTERM.
pub async fn signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

/// [`signal`] with its handlers installed now: the future completes on the first SIGINT or
/// SIGTERM from here on (one that arrives before it is polled included).
pub fn listen() -> std::io::Result<impl std::future::Future<Output = ()> + Send> {
    use tokio::signal::unix::{SignalKind, signal as unix_signal};
    let mut interrupt = unix_signal(SignalKind::interrupt())?;
    let mut terminate = unix_signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}
