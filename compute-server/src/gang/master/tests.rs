//! The gang master under the core's fake clock, with fakes for the agents' command streams
//! and for signals: jobs' phases, the tables issued and sent, kills, spread jobs, detaching.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ninf_gang::{Clock, FakeClock, JobId};
use ninf_proto::v1;
use ninf_proto::v1::agent_command::Kind;

use super::records::JobPhase;
use super::*;
use crate::config::GangSettings;

type FakeMaster = Arc<GangMaster<Arc<FakeClock>>>;

/// Every signal the master sent, in order.
#[derive(Clone, Default)]
struct RecordedSignals(Arc<Mutex<Vec<(u32, i32)>>>);

impl Signals for RecordedSignals {
    fn signal(&self, pid: u32, signal: i32) -> bool {
        self.0.lock().unwrap().push((pid, signal));
        true
    }
}

impl RecordedSignals {
    fn taken(&self) -> Vec<(u32, i32)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// An agent's command stream that keeps what it was sent.
#[derive(Clone, Default)]
struct RecordedAgent(Arc<Mutex<Vec<Kind>>>);

impl AgentLink for RecordedAgent {
    fn send(&self, command: v1::AgentCommand) -> bool {
        if let Some(kind) = command.kind {
            self.0.lock().unwrap().push(kind);
        }
        true
    }
}

impl RecordedAgent {
    fn taken(&self) -> Vec<Kind> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

struct Fixture {
    master: FakeMaster,
    clock: Arc<FakeClock>,
    signals: RecordedSignals,
}

fn fixture(processors: u32, settings: GangSettings) -> Fixture {
    let clock = Arc::new(FakeClock::new(100.0));
    let signals = RecordedSignals::default();
    let master = GangMaster::with_parts(
        settings,
        processors,
        clock.clone(),
        Box::new(signals.clone()),
    );
    Fixture {
        master,
        clock,
        signals,
    }
}

fn phase(master: &FakeMaster, id: JobId) -> &'static str {
    match master.lock().jobs.get(&id).map(|j| &j.phase) {
        None => "gone",
        Some(JobPhase::Queued(_)) => "queued",
        Some(JobPhase::Admitted { .. }) => "admitted",
        Some(JobPhase::Started { .. }) => "started",
        Some(JobPhase::Killed { .. }) => "killed",
    }
}

fn node(name: &str, columns: Vec<u32>) -> v1::AgentHello {
    v1::AgentHello {
        node: name.to_string(),
        columns,
        broker_socket: format!("/tmp/{name}.sock"),
        broker_address: format!("{name}:7300"),
    }
}

/// The calls of a batch run one after another in one job, most on the executable the
/// call before used: those issue no table (each would wake every job waiting for its
/// slot). A call on another executable tells the agents.
#[tokio::test]
async fn a_job_attached_again_to_the_processes_it_runs_on_issues_no_table() {
    let Fixture { master, .. } = fixture(1, GangSettings::default());
    let ticket = master.admit("noop", 1).await.unwrap();
    let mut tables = master.current.subscribe();
    ticket.attach(vec![4242], true).await;
    assert!(
        tables.has_changed().unwrap(),
        "the first call issued no table"
    );
    tables.borrow_and_update();
    ticket.attach(vec![4242], true).await;
    assert!(
        !tables.has_changed().unwrap(),
        "the next call on the same process issued a table"
    );
    ticket.attach(vec![4343], true).await;
    assert!(tables.has_changed().unwrap());
    let view = master.agents_view.borrow().clone();
    assert_eq!(view.jobs.get(&ticket.id).unwrap().processes, [4343]);
}

/// Admitted, started at its slot, gone when the ticket drops; the agents' view holds a job
/// only once its processes have their input, and its residence counts by the clock.
#[tokio::test]
async fn a_job_is_admitted_started_and_finished_and_the_agents_see_it_only_started() {
    let Fixture { master, clock, .. } = fixture(1, GangSettings::default());
    let ticket = master.admit("dgemm", 1).await.unwrap();
    assert_eq!(phase(&master, ticket.id), "admitted");
    ticket.attach(vec![501], false).await;
    assert!(!master.agents_view.borrow().jobs.contains_key(&ticket.id));
    assert!(master.current.borrow().jobs.contains_key(&ticket.id));
    ticket.set_runnable(true);
    ticket.wait_for_slot().await;
    assert_eq!(phase(&master, ticket.id), "started");
    assert_eq!(
        master
            .agents_view
            .borrow()
            .jobs
            .get(&ticket.id)
            .unwrap()
            .processes,
        [501]
    );
    clock.advance(2.5);
    let id = ticket.id;
    drop(ticket);
    assert_eq!(phase(&master, id), "gone");
    assert_eq!(master.jobs(), 0);
    assert_eq!(master.lock().mean_residence, 2.5);
}

/// With one row on one processor, a second job waits in the queue until the first leaves,
/// and the expected wait a new job is told is the mean residence per round ahead of it.
#[tokio::test]
async fn a_job_waits_queued_until_the_table_has_room() {
    let settings = GangSettings {
        max_rows: 1,
        ..GangSettings::default()
    };
    let Fixture { master, clock, .. } = fixture(1, settings);
    let first = master.admit("a", 1).await.unwrap();
    clock.advance(4.0);
    drop(first);
    assert_eq!(master.load().3, 0.0, "an empty table has no wait");
    let first = master.admit("a", 1).await.unwrap();
    let waiting = tokio::spawn({
        let master = master.clone();
        async move { master.admit("b", 1).await }
    });
    tokio::task::yield_now().await;
    let (running, queued, _, wait) = master.load();
    assert_eq!((running, queued), (1, 1));
    assert_eq!(
        wait,
        2.0 * 4.0,
        "two jobs ahead of a new one in a table of one"
    );
    let queued_id = first.id + 1;
    assert_eq!(phase(&master, queued_id), "queued");
    clock.advance(1.0);
    drop(first);
    let second = waiting.await.unwrap().unwrap();
    assert_eq!(second.id, queued_id);
    assert_eq!(phase(&master, second.id), "admitted");
    assert_eq!(master.lock().jobs[&second.id].in_table_since(), Some(105.0));
}

/// A parallel job deadlocked is killed once its grace has passed by the clock, with its
/// processes signalled and a reason naming the routine; only once.
#[tokio::test]
async fn a_deadlocked_job_is_killed_after_its_grace_and_only_once() {
    let Fixture {
        master,
        clock,
        signals,
    } = fixture(2, GangSettings::default());
    let ticket = master.admit("ring", 2).await.unwrap();
    ticket.attach(vec![301, 302], true).await;
    master.set_deadlocked(ticket.id, true);
    clock.advance(9.0);
    assert_eq!(master.kill_deadlocked(), 0, "killed within its grace");
    master.set_deadlocked(ticket.id, false);
    clock.advance(9.0);
    assert_eq!(master.kill_deadlocked(), 0, "a revived job was killed");
    master.set_deadlocked(ticket.id, true);
    clock.advance(10.5);
    assert_eq!(master.kill_deadlocked(), 1);
    assert_eq!(
        signals.taken(),
        [(301, libc::SIGKILL), (302, libc::SIGKILL)]
    );
    let reason = ticket.killed().unwrap();
    assert!(
        reason.contains("all 2 ranks of `ring`") && reason.contains("10 s grace"),
        "{reason}"
    );
    assert_eq!(phase(&master, ticket.id), "killed");
    assert_eq!(master.kill_deadlocked(), 0);
    assert!(signals.taken().is_empty());
    assert_eq!(master.status().deadlocks_killed, 1);
}

/// A job alone runs every slot; with a second runnable job on the one processor, it runs
/// about half of them, by the tables issued.
#[tokio::test]
async fn running_time_counts_only_the_slots_a_job_had() {
    let Fixture { master, clock, .. } = fixture(1, GangSettings::default());
    let a = master.admit("a", 1).await.unwrap();
    a.attach(vec![11], true).await;
    clock.advance(3.0);
    assert!(
        (a.running_seconds() - 3.0).abs() < 1e-9,
        "{}",
        a.running_seconds()
    );
    let b = master.admit("b", 1).await.unwrap();
    b.attach(vec![12], false).await;
    b.set_runnable(true);
    clock.advance(10.0);
    let ran = a.running_seconds() - 3.0;
    assert!((4.8..=5.2).contains(&ran), "ran {ran} s of 10 shared");
    assert!((b.running_seconds() - (10.0 - ran)).abs() < 0.2);
}

/// A job whose slot has not come waits for it by the clock, and once it has started, the
/// sender gives the agents a table holding both jobs' processes (one of them is stopped now).
/// Moving the fake clock wakes the waiting job at its next check.
#[tokio::test]
async fn a_job_waits_for_its_slot_by_the_clock_and_the_agents_get_the_table() {
    let Fixture { master, clock, .. } = fixture(1, GangSettings::default());
    let sender = spawn_table_sender(&master);
    let mut tables = master.tables();
    let a = master.admit("a", 1).await.unwrap();
    a.attach(vec![21], true).await;
    let b = Arc::new(master.admit("b", 1).await.unwrap());
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.attach(vec![22], true).await }
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let table = master.current.borrow().clone();
    let now = clock.now();
    assert!(table.running_at(now).contains(&a.id));
    assert!(!waiting.is_finished(), "b started in a's slot");
    assert_eq!(phase(&master, b.id), "admitted");
    let slot = table.slot_number(now);
    let b_slot = (1..=table.horizon())
        .map(|k| slot + k)
        .find(|&n| table.slot(n).unwrap().running.contains(&b.id))
        .unwrap();
    clock.set(table.slot_start(b_slot) + 0.001);
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(phase(&master, b.id), "started");
    let both = |t: &Arc<v1::TimeTableMessage>| {
        let mut processes: Vec<u32> = t.jobs.iter().flat_map(|j| j.processes.clone()).collect();
        processes.sort();
        processes == [21, 22]
    };
    tokio::time::timeout(Duration::from_secs(10), tables.wait_for(both))
        .await
        .unwrap()
        .unwrap();
    sender.abort();
}

/// A spread job opens on its node's broker, runs its ranks through the node's agent, and
/// is killed when the node reports its messages lost: the server signals nothing (the
/// ranks are the agent's), the node is told to close it, and the call learns why.
#[tokio::test]
async fn a_spread_job_runs_on_node_agents_and_dies_with_its_lost_messages() {
    let Fixture {
        master, signals, ..
    } = fixture(2, GangSettings::default());
    let agent = RecordedAgent::default();
    master.attach_node(node("n0", vec![0, 1]), Box::new(agent.clone()));
    let ticket = master.admit("ring", 2).await.unwrap();
    let id = ticket.id;
    let opening = tokio::spawn({
        let master = master.clone();
        async move { master.open_spread(id).await }
    });
    tokio::task::yield_now().await;
    assert!(
        matches!(&agent.taken()[..], [Kind::OpenJob(open)] if open.job == id && open.size == 2)
    );
    master.node_opened("n0", id);
    let sockets = opening.await.unwrap().unwrap();
    assert_eq!(sockets, ["/tmp/n0.sock", "/tmp/n0.sock"]);

    let runs = vec![v1::SpmdRunRank::default(), v1::SpmdRunRank::default()];
    let replies = master.run_on_nodes(id, runs).unwrap();
    assert_eq!(agent.taken().len(), 2);
    for (rank, pid) in [(0, 901), (1, 902)] {
        master.node_rank_started(v1::SpmdRankStarted { job: id, rank, pid });
    }
    assert_eq!(replies.started.await.unwrap(), [901, 902]);
    ticket.attach(vec![901, 902], true).await;

    master.node_lost_messages(
        "n0",
        v1::SpmdLost {
            job: id,
            reason: "connection reset".to_string(),
            ..Default::default()
        },
    );
    let reason = ticket.killed().unwrap();
    assert_eq!(
        reason,
        "messages from node `n0` were lost: connection reset; the job cannot complete"
    );
    assert!(signals.taken().is_empty(), "signalled a node agent's ranks");
    assert!(matches!(&agent.taken()[..], [Kind::CloseJob(close)] if close.reason == reason));
}

/// An agent that attached again under its name is not detached by its old stream's end;
/// its real detach continues the server's processes on its columns.
#[tokio::test]
async fn only_the_current_attachment_of_a_node_detaches_it() {
    let Fixture {
        master, signals, ..
    } = fixture(1, GangSettings::default());
    let old = master.attach_node(node("n0", vec![0]), Box::new(RecordedAgent::default()));
    let current = master.attach_node(node("n0", vec![0]), Box::new(RecordedAgent::default()));
    let ticket = master.admit("a", 1).await.unwrap();
    ticket.attach(vec![777], true).await;
    master.detach_node("n0", old);
    assert!(master.status().nodes[0].attached);
    assert!(signals.taken().is_empty());
    master.detach_node("n0", current);
    assert!(!master.status().nodes[0].attached);
    assert_eq!(signals.taken(), [(777, libc::SIGCONT)]);
}

/// Switch skews come from the continue times every process of a job reported at one
/// boundary: the latest less the earliest.
#[tokio::test]
async fn a_boundarys_skew_is_measured_once_every_process_reported() {
    let Fixture { master, .. } = fixture(2, GangSettings::default());
    master.attach_node(node("n0", vec![0, 1]), Box::new(RecordedAgent::default()));
    let ticket = master.admit("pair", 2).await.unwrap();
    ticket.attach(vec![41, 42], true).await;
    let sample = |resumed_ns| v1::ResumeSample {
        version: 3,
        slot: 7,
        job: ticket.id,
        at_boundary: true,
        resumed_ns,
        ..Default::default()
    };
    let report = |samples| v1::AgentReport {
        resumes: samples,
        switches: 5,
        ..Default::default()
    };
    master.node_report("n0", report(vec![sample(1_000_000)]));
    assert_eq!(master.status().skew_samples, 0);
    master.node_report("n0", report(vec![sample(1_250_000)]));
    let status = master.status();
    assert_eq!(status.skew_samples, 1);
    assert_eq!(status.skew_max_us, 250.0);
    assert_eq!(master.switches(), 5);
    master.reset_skews();
    assert_eq!(master.status().skew_samples, 0);
}
