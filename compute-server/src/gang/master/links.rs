//! What the gang master reaches beyond its own state: each node agent's command stream and
//! the processes this server started. Both sit behind traits, so the master's logic can be
//! driven by fakes that record what it sent (and a test never signals a real process).

use ninf_proto::v1;
use tokio::sync::mpsc;

use ninf_gang::Clock;

/// One attached node agent, as the master talks to it (besides the time tables, which every
/// agent reads from one broadcast).
pub trait AgentLink: Send + Sync {
    /// Sends a command to the agent; `false` if its stream has gone.
    fn send(&self, command: v1::AgentCommand) -> bool;
}

impl AgentLink for mpsc::UnboundedSender<v1::AgentCommand> {
    fn send(&self, command: v1::AgentCommand) -> bool {
        mpsc::UnboundedSender::send(self, command).is_ok()
    }
}

/// How the master signals the processes it started itself (to kill a job, or to let a
/// node's processes run ungated once its agent has gone).
pub trait Signals: Send + Sync {
    /// Sends `signal` to process `pid`; `false` if it could not be delivered.
    fn signal(&self, pid: u32, signal: i32) -> bool;
}

/// The operating system's `kill(2)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsSignals;

impl Signals for OsSignals {
    fn signal(&self, pid: u32, signal: i32) -> bool {
        crate::gang::signal(pid, signal)
    }
}

/// The clocks a gang master can run by: the machine's in a live server, a fake one in tests.
/// Cloned into the gang core, and read by the master's own tasks.
pub trait MasterClock: Clock + Clone + Send + Sync + 'static {}

impl<C: Clock + Clone + Send + Sync + 'static> MasterClock for C {}
