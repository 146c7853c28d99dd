//! An in-memory cluster for tests of the proxy's graph execution and recovery, with no
//! processes: servers that run one routine, hold objects by owner, and fail on demand
//! (dead, losing what they store, refusing uploads, doing a request but losing its reply). Its routine adds 1 to the element-wise sum of its
//! input arrays (f64); the last argument is the output.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use bytes::Bytes;
use ninf_proto::probe::PathMeasurement;
use ninf_proto::v1;
use tonic::Status;

use crate::cluster::Cluster;

/// One fake server.
#[derive(Debug, Clone, Default)]
pub(crate) struct FakeServer {
    pub mflops: f64,
    /// Down: every request to it fails as a refused connection would.
    pub dead: bool,
    /// Objects it stores are gone at once (a restart between calls).
    pub loses_objects: bool,
    /// Uploads to it fail.
    pub refuses_uploads: bool,
    /// Its next this many calls fail as its restart would; it is back at once after each.
    pub fails_calls: u32,
    /// In its next this many calls the routine's process exits with status 10.
    pub crashes_calls: u32,
    /// Its next this many storage requests (puts, copies, adoptions) do their work but fail
    /// as a link that broke before the reply fails them.
    pub drops_replies: u32,
    /// The site the metaserver lists it in (empty: none named).
    pub site: String,
    /// How long each of its calls computes before its answer (real time; 0: none).
    pub call_seconds: f64,
    pub(crate) objects: HashMap<String, Bytes>,
    /// Each object's owner, by object id.
    pub(crate) owners: HashMap<String, String>,
}

impl FakeServer {
    /// Whether the reply to the request it just did is lost.
    fn reply_lost(&mut self) -> bool {
        let lost = self.drops_replies > 0;
        self.drops_replies = self.drops_replies.saturating_sub(1);
        lost
    }
}

fn reply_lost(server: &str) -> Status {
    Status::unavailable(format!("error reading from {server}: connection reset"))
}

/// What a call looked like when it arrived, for assertions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Invocation {
    pub server: String,
    /// Per argument: "value", "object" or "none".
    pub sources: Vec<&'static str>,
    /// Where the call was asked to write its outputs in a client's region.
    pub output_place: Option<v1::OutputPlace>,
    /// Whether the proxy said the call runs alone in its graph.
    pub alone: bool,
    /// Calls out on its server as it arrived, itself included.
    pub out_on_server: u32,
}

#[derive(Default)]
struct State {
    servers: BTreeMap<String, FakeServer>,
    invocations: Vec<Invocation>,
    /// Calls arrived and not yet answered, by server.
    out: HashMap<String, u32>,
    next_id: u64,
}

#[derive(Default)]
pub(crate) struct FakeCluster {
    state: Mutex<State>,
    /// Times the proxy closed its connections.
    releases: std::sync::atomic::AtomicUsize,
}

fn refused(server: &str) -> Status {
    Status::unavailable(format!("connection to {server} refused"))
}

pub(crate) fn doubles(values: &[f64]) -> v1::Array {
    v1::Array {
        element_type: v1::ElementType::Double as i32,
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

pub(crate) fn values(data: &[u8]) -> Vec<f64> {
    data.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

impl FakeCluster {
    pub(crate) fn new(servers: &[(&str, FakeServer)]) -> FakeCluster {
        let cluster = FakeCluster::default();
        let mut state = ninf_proto::sync::lock(&cluster.state);
        for (address, server) in servers {
            state.servers.insert(address.to_string(), server.clone());
        }
        drop(state);
        cluster
    }

    pub(crate) fn releases(&self) -> usize {
        self.releases.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn invocations(&self) -> Vec<Invocation> {
        ninf_proto::sync::lock(&self.state).invocations.clone()
    }

    /// Every server and its speed, dead or alive (the metaserver lists a dead server as up
    /// until its heartbeats time out).
    pub(crate) fn servers(&self) -> Vec<(String, f64)> {
        let state = ninf_proto::sync::lock(&self.state);
        state
            .servers
            .iter()
            .map(|(address, s)| (address.clone(), s.mflops))
            .collect()
    }

    /// The site a server is listed in.
    pub(crate) fn site_of(&self, server: &str) -> String {
        let state = ninf_proto::sync::lock(&self.state);
        state
            .servers
            .get(server)
            .map(|s| s.site.clone())
            .unwrap_or_default()
    }

    pub(crate) fn stored_on(&self, server: &str) -> usize {
        let state = ninf_proto::sync::lock(&self.state);
        state.servers.get(server).map_or(0, |s| s.objects.len())
    }

    /// The owners of the objects `server` holds, one per object, sorted.
    pub(crate) fn owners_on(&self, server: &str) -> Vec<String> {
        let state = ninf_proto::sync::lock(&self.state);
        let mut owners: Vec<String> = state
            .servers
            .get(server)
            .map(|s| s.owners.values().cloned().collect())
            .unwrap_or_default();
        owners.sort();
        owners
    }

    /// Takes `server` down (every request to it refused) or brings it back.
    pub(crate) fn set_dead(&self, server: &str, dead: bool) {
        let mut state = ninf_proto::sync::lock(&self.state);
        if let Some(s) = state.servers.get_mut(server) {
            s.dead = dead;
        }
    }

    /// Makes `server`'s next `requests` storage requests lose their replies.
    pub(crate) fn drop_replies(&self, server: &str, requests: u32) {
        let mut state = ninf_proto::sync::lock(&self.state);
        if let Some(s) = state.servers.get_mut(server) {
            s.drops_replies = requests;
        }
    }

    /// Reads an argument's data: inline, or from the server that stores it.
    fn read(state: &State, argument: &v1::CallArgument) -> Result<Option<Vec<f64>>, Status> {
        match &argument.source {
            Some(v1::call_argument::Source::Value(v1::ArgumentValue {
                value: Some(v1::argument_value::Value::Array(array)),
            })) => Ok(Some(values(&array.data))),
            Some(v1::call_argument::Source::Object(object)) => {
                let data = state
                    .servers
                    .get(&object.server)
                    .filter(|s| !s.dead)
                    .and_then(|s| s.objects.get(&object.object_id));
                match data {
                    Some(data) => Ok(Some(values(data))),
                    None => Err(Status::failed_precondition(format!(
                        "cannot fetch object {} from {}: not found",
                        object.object_id, object.server
                    ))),
                }
            }
            _ => Ok(None),
        }
    }

    fn store(state: &mut State, server: &str, owner: &str, data: Bytes) -> v1::ObjectRef {
        state.next_id += 1;
        let object_id = format!("object-{}", state.next_id);
        if let Some(s) = state.servers.get_mut(server)
            && !s.loses_objects
        {
            s.objects.insert(object_id.clone(), data);
            s.owners.insert(object_id.clone(), owner.to_string());
        }
        v1::ObjectRef {
            server: server.to_string(),
            object_id,
        }
    }

    fn live<'a>(state: &'a mut State, server: &str) -> Result<&'a mut FakeServer, Status> {
        state
            .servers
            .get_mut(server)
            .filter(|s| !s.dead)
            .ok_or_else(|| refused(server))
    }

    /// The fake routine's answer to `call` on `server`, which `out_on_server` calls had
    /// reached.
    fn answer(
        &self,
        server: &str,
        call: v1::CallRequest,
        out_on_server: u32,
    ) -> Result<v1::CallReply, Status> {
        let mut state = ninf_proto::sync::lock(&self.state);
        let sources = call
            .arguments
            .iter()
            .map(|a| match a.source {
                Some(v1::call_argument::Source::Value(_)) => "value",
                Some(v1::call_argument::Source::Object(_)) => "object",
                Some(v1::call_argument::Source::Bulk(_)) => "bulk",
                Some(v1::call_argument::Source::Shared(_)) => "shared",
                Some(v1::call_argument::Source::Data(_)) => "data",
                None => "none",
            })
            .collect();
        state.invocations.push(Invocation {
            server: server.to_string(),
            sources,
            output_place: call.output_place.clone(),
            alone: call.alone,
            out_on_server,
        });
        let live = Self::live(&mut state, server)?;
        if live.fails_calls > 0 {
            live.fails_calls -= 1;
            return Err(Status::unavailable(format!(
                "connection to {server} reset: it restarted"
            )));
        }
        if live.crashes_calls > 0 {
            live.crashes_calls -= 1;
            return Err(ninf_proto::net::crash::crashed(
                &call.function,
                "executable of module `fake`: early eof; the process exited with status 10",
            ));
        }
        let mut sum: Vec<f64> = Vec::new();
        for argument in &call.arguments {
            if let Some(input) = Self::read(&state, argument)? {
                sum.resize(sum.len().max(input.len()), 0.0);
                sum.iter_mut().zip(&input).for_each(|(s, v)| *s += v);
            }
        }
        let result: Vec<f64> = sum.iter().map(|v| v + 1.0).collect();
        let parameter = call.arguments.len().saturating_sub(1) as u32;
        let output = if call.keep.contains(&parameter) {
            let data = doubles(&result).data;
            v1::call_output::Result::Object(Self::store(&mut state, server, &call.owner, data))
        } else {
            v1::call_output::Result::Array(doubles(&result))
        };
        Ok(v1::CallReply {
            outputs: vec![v1::CallOutput {
                parameter,
                result: Some(output),
            }],
            ..Default::default()
        })
    }
}

#[tonic::async_trait]
impl Cluster for FakeCluster {
    fn release_connections(&self) {
        self.releases
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    async fn invoke(&self, server: &str, call: v1::CallRequest) -> Result<v1::CallReply, Status> {
        let (out_on_server, computes) = {
            let mut state = ninf_proto::sync::lock(&self.state);
            let computes = state.servers.get(server).map_or(0.0, |s| s.call_seconds);
            let out = state.out.entry(server.to_string()).or_default();
            *out += 1;
            (*out, computes)
        };
        // Lets the proxy's other calls issued with this one arrive before it is answered,
        // as they would at a server that computes for a while.
        tokio::task::yield_now().await;
        if computes > 0.0 {
            tokio::time::sleep(std::time::Duration::from_secs_f64(computes)).await;
        }
        let reply = self.answer(server, call, out_on_server);
        let mut state = ninf_proto::sync::lock(&self.state);
        if let Some(out) = state.out.get_mut(server) {
            *out = out.saturating_sub(1);
        }
        reply
    }

    async fn get(&self, object: &v1::ObjectRef) -> Result<v1::Array, Status> {
        let mut state = ninf_proto::sync::lock(&self.state);
        let server = Self::live(&mut state, &object.server)?;
        let data = server
            .objects
            .get(&object.object_id)
            .ok_or_else(|| Status::not_found(format!("no object {}", object.object_id)))?;
        Ok(v1::Array {
            element_type: v1::ElementType::Double as i32,
            data: data.clone(),
        })
    }

    async fn stat(&self, server: &str, object_id: &str) -> Result<(), Status> {
        let mut state = ninf_proto::sync::lock(&self.state);
        match Self::live(&mut state, server)?
            .objects
            .contains_key(object_id)
        {
            true => Ok(()),
            false => Err(Status::not_found(format!("no object {object_id}"))),
        }
    }

    async fn put(
        &self,
        server: &str,
        owner: &str,
        array: v1::Array,
    ) -> Result<v1::ObjectRef, Status> {
        let mut state = ninf_proto::sync::lock(&self.state);
        if Self::live(&mut state, server)?.refuses_uploads {
            return Err(Status::resource_exhausted(format!("{server} is full")));
        }
        let object = Self::store(&mut state, server, owner, array.data);
        match Self::live(&mut state, server)?.reply_lost() {
            true => Err(reply_lost(server)),
            false => Ok(object),
        }
    }

    async fn delete_owner(&self, server: &str, owner: &str) -> Result<(), Status> {
        let mut state = ninf_proto::sync::lock(&self.state);
        let live = Self::live(&mut state, server)?;
        let owned: Vec<String> = live
            .owners
            .iter()
            .filter(|(_, o)| o.as_str() == owner)
            .map(|(id, _)| id.clone())
            .collect();
        for id in owned {
            live.objects.remove(&id);
            live.owners.remove(&id);
        }
        Ok(())
    }

    async fn adopt(&self, object: &v1::ObjectRef, owner: &str) -> Result<(), Status> {
        let mut state = ninf_proto::sync::lock(&self.state);
        let live = Self::live(&mut state, &object.server)?;
        let Some(held) = live.owners.get_mut(&object.object_id) else {
            return Err(Status::not_found(format!("no object {}", object.object_id)));
        };
        *held = owner.to_string();
        match live.reply_lost() {
            true => Err(reply_lost(&object.server)),
            false => Ok(()),
        }
    }

    async fn delete(&self, object: &v1::ObjectRef) -> Result<(), Status> {
        let mut state = ninf_proto::sync::lock(&self.state);
        let live = Self::live(&mut state, &object.server)?;
        live.owners.remove(&object.object_id);
        match live.objects.remove(&object.object_id) {
            Some(_) => Ok(()),
            None => Err(Status::not_found(format!("no object {}", object.object_id))),
        }
    }

    async fn copy_from(
        &self,
        server: &str,
        source: &v1::ObjectRef,
        owner: &str,
    ) -> Result<v1::ObjectRef, Status> {
        let mut state = ninf_proto::sync::lock(&self.state);
        let data = Self::live(&mut state, &source.server)?
            .objects
            .get(&source.object_id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("no object {}", source.object_id)))?;
        Self::live(&mut state, server)?;
        let copied = Self::store(&mut state, server, owner, data);
        match Self::live(&mut state, server)?.reply_lost() {
            true => Err(reply_lost(server)),
            false => Ok(copied),
        }
    }

    async fn renew(&self, server: &str, _owner: &str) -> Result<(), Status> {
        Self::live(&mut ninf_proto::sync::lock(&self.state), server).map(|_| ())
    }

    async fn health(&self, server: &str) -> Result<(), Status> {
        Self::live(&mut ninf_proto::sync::lock(&self.state), server).map(|_| ())
    }

    async fn probe(&self, server: &str, _bytes: usize) -> Result<PathMeasurement, Status> {
        Self::live(&mut ninf_proto::sync::lock(&self.state), server)?;
        Ok(PathMeasurement {
            throughput_bytes_per_second: 1e9,
            latency_seconds: 1e-4,
        })
    }
}
