//! The host side: spawn a generated executable and call routines in it, one call at a time.
//! A compute server keeps a pool of these; tests use one directly.

use std::io::{BufReader, BufWriter};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};

use ninf_proto::v1::{self, ExecErrorKind};
use prost::Message;

use crate::frame::{self, DEFAULT_MAX_FRAME, Frame, FrameError};
use crate::shared::{HostRegions, SHARED_THRESHOLD, restore_reply_outputs};

/// Why a call through an executable failed.
#[derive(Debug, thiserror::Error)]
pub enum CallFailure {
    /// The executable answered with an error; it is still usable.
    #[error("{message}")]
    Routine {
        kind: ExecErrorKind,
        message: String,
    },
    /// The executable died or broke the protocol; it must be replaced.
    #[error("executable failed: {reason}")]
    Crashed { reason: String },
}

/// One running executable.
pub struct ExecutableProcess {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    regions: HostRegions,
    next_call_id: u64,
}

impl ExecutableProcess {
    /// Starts the executable with its standard error inherited.
    pub fn spawn(path: &Path) -> std::io::Result<ExecutableProcess> {
        let regions = HostRegions::create()?;
        let mut child = executable_command(path, &regions).spawn()?;
        let (stdin, stdout) = match take_pipes(child.stdin.take(), child.stdout.take()) {
            Ok(pipes) => pipes,
            Err(e) => {
                let _ = child.kill();
                return Err(e);
            }
        };
        Ok(ExecutableProcess {
            child,
            stdin: BufWriter::with_capacity(1 << 16, stdin),
            stdout: BufReader::with_capacity(1 << 16, stdout),
            regions,
            next_call_id: 1,
        })
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Calls `function` with positional arguments and waits for the reply.
    pub fn call(
        &mut self,
        function: &str,
        arguments: Vec<v1::ArgumentValue>,
    ) -> Result<v1::ExecSuccess, CallFailure> {
        let call_id = self.next_call_id;
        self.next_call_id += 1;
        let mut request = v1::ExecRequest {
            call_id,
            function: function.to_string(),
            arguments,
            ..Default::default()
        };
        if request.encoded_len() >= SHARED_THRESHOLD {
            let written = self.regions.requests.write_request(&mut request);
            let sent = written
                .map_err(FrameError::Io)
                .and_then(|len| frame::write_shared_header(&mut self.stdin, len));
            sent.map_err(|e| self.crashed(e.to_string()))?;
        } else {
            self.send_raw(&request.encode_to_vec())?;
        }
        let reply = self.receive()?;
        if reply.call_id != call_id {
            return Err(self.crashed(format!(
                "reply to call {} arrived while waiting for call {call_id}",
                reply.call_id
            )));
        }
        match reply.result {
            Some(v1::exec_reply::Result::Success(success)) => Ok(success),
            Some(v1::exec_reply::Result::Error(error)) => Err(CallFailure::Routine {
                kind: ExecErrorKind::try_from(error.kind).unwrap_or(ExecErrorKind::Unspecified),
                message: error.message,
            }),
            None => Err(self.crashed("reply has no result".to_string())),
        }
    }

    /// Sends one frame as is (tests use it to send malformed requests).
    pub fn send_raw(&mut self, body: &[u8]) -> Result<(), CallFailure> {
        frame::write_frame(&mut self.stdin, body).map_err(|e| self.crashed(e.to_string()))
    }

    /// Reads one reply frame.
    pub fn receive(&mut self) -> Result<v1::ExecReply, CallFailure> {
        let body = match frame::read_any_frame(&mut self.stdout, DEFAULT_MAX_FRAME) {
            Ok(Some(Frame::Inline(body))) => bytes::Bytes::from(body),
            // Copied out: the region is rewritten by the next reply.
            Ok(Some(Frame::Shared(len))) => match self.regions.replies.copy(len) {
                Ok(body) => body,
                Err(e) => return Err(self.crashed(format!("unreadable shared reply: {e}"))),
            },
            Ok(None) | Err(FrameError::Truncated) => {
                return Err(self.crashed("closed its output".to_string()));
            }
            Err(e) => return Err(self.crashed(e.to_string())),
        };
        let mut reply = v1::ExecReply::decode(body)
            .map_err(|e| self.crashed(format!("sent an undecodable reply: {e}")))?;
        // Copied out: the region is rewritten by the next reply.
        match restore_reply_outputs(&mut self.regions.replies, &mut reply, false) {
            // This host gives no store region, so asks for no output there.
            Ok(()) if stored_outputs(&reply) => {
                Err(self.crashed("sent an output in a store region it was not given".to_string()))
            }
            Ok(()) => Ok(reply),
            Err(e) => Err(self.crashed(format!("sent a bad region output: {e}"))),
        }
    }

    /// Describes a broken executable, with its exit status when it has exited.
    fn crashed(&mut self, what: String) -> CallFailure {
        let status = match self.child.try_wait() {
            Ok(Some(status)) => Some(status),
            // Give a dying process a moment to be reaped so the status can be reported.
            _ => {
                std::thread::sleep(std::time::Duration::from_millis(20));
                self.child.try_wait().ok().flatten()
            }
        };
        let reason = match status {
            Some(status) => format!("{what}; {}", describe_exit(status)),
            None => what,
        };
        CallFailure::Crashed { reason }
    }

    /// Closes the executable's input and waits for it to exit.
    pub fn shutdown(mut self) -> std::io::Result<ExitStatus> {
        drop(self.stdin);
        self.child.wait()
    }

    /// Kills the executable now.
    pub fn kill(&mut self) -> std::io::Result<()> {
        self.child.kill()?;
        self.child.wait().map(|_| ())
    }
}

/// Whether a reply still describes outputs in a store region after its own were restored.
fn stored_outputs(reply: &v1::ExecReply) -> bool {
    matches!(&reply.result,
        Some(v1::exec_reply::Result::Success(s)) if !s.region_outputs.is_empty())
}

/// The command that starts an executable: frames on piped standard input and output,
/// standard error inherited, and the shared regions handed over as descriptors 3 and 4.
/// OpenBLAS in an executable computes on the caller's thread alone
/// (`OPENBLAS_NUM_THREADS=1`, unless the server's own environment sets it): a routine
/// computes on the threads the host gives each call (`threads`), and OpenBLAS's own pool,
/// started when the library loads, spins a core for about 0.1 s doing nothing.
pub fn executable_command(path: &Path, regions: &HostRegions) -> Command {
    let mut command = Command::new(path);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if std::env::var_os(OPENBLAS_THREADS).is_none() {
        command.env(OPENBLAS_THREADS, "1");
    }
    regions.attach(&mut command);
    command
}

/// The variable OpenBLAS reads its thread count from when it loads.
const OPENBLAS_THREADS: &str = "OPENBLAS_NUM_THREADS";

/// A started executable's frame pipes, widened (see [`widen_pipe`]).
pub fn take_pipes<I: std::os::fd::AsRawFd, O: std::os::fd::AsRawFd>(
    stdin: Option<I>,
    stdout: Option<O>,
) -> std::io::Result<(I, O)> {
    let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
        return Err(std::io::Error::other(
            "executable has no standard input or output",
        ));
    };
    widen_pipe(&stdin);
    widen_pipe(&stdout);
    Ok((stdin, stdout))
}

/// Largest pipe buffer an unprivileged process may ask for by default (`pipe-max-size`).
const PIPE_BYTES: i32 = 1 << 20;

/// Asks for a 1 MiB pipe buffer instead of 64 KiB: large arrays then cross in 16 times fewer
/// round trips between the two processes (measured: 32 MiB in ~28 ms instead of ~53 ms).
/// Best effort: if the kernel refuses, the default buffer still works.
pub fn widen_pipe(pipe: &impl std::os::fd::AsRawFd) {
    // SAFETY: F_SETPIPE_SZ only resizes the kernel buffer of a pipe this process owns; an
    // invalid request fails with an error code and changes nothing.
    unsafe {
        libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES);
    }
}

fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => "exited".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executables_start_with_openblas_on_one_thread() {
        let regions = HostRegions::create().expect("regions");
        let command = executable_command(Path::new("/bin/true"), &regions);
        let set: Vec<_> = command
            .get_envs()
            .filter(|(name, _)| *name == OPENBLAS_THREADS)
            .collect();
        // The test's own environment decides which promise holds.
        match std::env::var_os(OPENBLAS_THREADS) {
            None => assert_eq!(set, [(OPENBLAS_THREADS.as_ref(), Some("1".as_ref()))]),
            Some(_) => assert!(set.is_empty(), "the server's own setting is inherited"),
        }
    }
}
