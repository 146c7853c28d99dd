//! What the journal records: a transaction as accepted ([`JournaledRun`]), the entries
//! written as it runs ([`Entry`]), and the hash that tells a resent graph from another.

use std::collections::HashMap;

use ninf_proto::v1;

/// A transaction as journaled.
#[derive(Debug, Clone, PartialEq)]
pub struct JournaledRun {
    pub transaction_id: String,
    /// The client it was admitted for: only that client may pick it up again.
    pub client: String,
    pub graph_hash: u64,
    /// Under which its intermediates are stored on the servers.
    pub owner: String,
    pub placement: v1::ScheduleReply,
    pub accepted_ms: i64,
    /// Each finished task's report, its outputs the objects it kept
    /// (`call_output::Result::Object`).
    pub tasks: Vec<v1::TaskReport>,
    /// For a transaction that ran to its end and writes data handles: what it did, recorded
    /// before the handles were given their new values. Such a transaction never runs again.
    pub commit: Option<v1::JournaledCommit>,
    /// When such a transaction was answered, its writes done (Unix ms): kept since only to
    /// answer its client again (`answer_keep_seconds`).
    pub answered_ms: Option<i64>,
}

impl JournaledRun {
    /// Every server it may have stored anything on: its placement's, its objects' and its
    /// commit's.
    pub fn servers(&self) -> Vec<String> {
        let committed = self
            .commit
            .iter()
            .flat_map(|c| c.writes.iter().chain(&c.replicas).chain(&c.written_copies))
            .filter_map(|w| w.object.as_ref());
        let mut servers: Vec<String> = self
            .placement
            .placements
            .iter()
            .map(|p| p.server.clone())
            .chain(self.objects().map(|(_, _, o)| o.server.clone()))
            .chain(committed.map(|o| o.server.clone()))
            .collect();
        servers.sort();
        servers.dedup();
        servers
    }

    /// (task, parameter, object) of every object its finished tasks kept.
    pub fn objects(&self) -> impl Iterator<Item = (usize, u32, &v1::ObjectRef)> {
        self.tasks.iter().flat_map(|report| {
            report.outputs.iter().filter_map(move |o| match &o.result {
                Some(v1::call_output::Result::Object(object)) => {
                    Some((report.task as usize, o.parameter, object))
                }
                _ => None,
            })
        })
    }
}

/// One change to the journal.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A transaction was placed and starts (again, for a resend whose graph differs).
    Accepted(Box<JournaledRun>),
    /// A task finished, keeping these objects.
    TaskKept {
        transaction_id: String,
        report: v1::TaskReport,
    },
    /// A transaction that writes data handles ran to its end: what it did, before the
    /// handles are given their new values.
    Committed {
        transaction_id: String,
        commit: v1::JournaledCommit,
    },
    /// A transaction that wrote data handles was answered, its writes done: its commit is
    /// kept, to answer a resend from, and the rest forgotten.
    Answered { transaction_id: String, at_ms: i64 },
    /// A transaction ended (replied, failed or abandoned) and was cleaned up.
    Finished(String),
}

/// FNV-1a over a graph's encoding, its tasks' scalars in key order (a protobuf map's
/// encoding follows the order of a hash map, which differs between processes): a resent
/// transaction must carry the graph it was journaled with.
pub fn graph_hash(graph: &v1::TaskGraph) -> u64 {
    let mut hash = Fnv::default();
    hash.write(&(graph.tasks.len() as u64).to_le_bytes());
    hash.write(&(graph.edges.len() as u64).to_le_bytes());
    for task in &graph.tasks {
        let mut scalars: Vec<(&String, &i64)> = task.scalars.iter().collect();
        scalars.sort();
        for (name, value) in scalars {
            hash.write(name.as_bytes());
            hash.write(&value.to_le_bytes());
        }
        let without_scalars = v1::GraphTask {
            scalars: HashMap::new(),
            ..task.clone()
        };
        hash.write(&prost::Message::encode_to_vec(&without_scalars));
    }
    for edge in &graph.edges {
        hash.write(&prost::Message::encode_to_vec(edge));
    }
    hash.0
}

/// The FNV-1a hash, 64 bits.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}
