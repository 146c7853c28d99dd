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
