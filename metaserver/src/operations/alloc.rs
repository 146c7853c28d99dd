//! `ninf alloc`: adding, listing, pausing, resuming and removing allocation queues. A queue
//! is added only after the batch system accepts a dry run of its job script, and removing
//! one cancels its jobs.

use ninf_proto::v1;

use crate::allocation::run::refused;
use crate::allocation::{JobState, Queue, QueueSpec};
use crate::{Metaserver, MetaserverError, unix_now};

impl Metaserver {
    /// Adds a queue after a dry-run submission of its script.
    pub async fn add_queue(
        &self,
        spec: v1::AllocQueueSpec,
    ) -> Result<v1::AllocQueue, MetaserverError> {
        let spec =
            QueueSpec::from_proto(&spec).map_err(|e| MetaserverError::BadRequest(e.to_string()))?;
        let _one = self.alloc.changing.lock().await;
        if self.alloc.queues().iter().any(|q| q.spec.name == spec.name) {
            return Err(MetaserverError::QueueExists(spec.name));
        }
        let script = self.write_script(&spec)?;
        self.alloc
            .batch
            .test_submit(&script, &spec.batch_args)
            .await
            .map_err(refused)?;
        if !self.db.add_queue(&spec, unix_now()).await? {
            return Err(MetaserverError::QueueExists(spec.name));
        }
        let queue = Queue {
            spec,
            paused: false,
            failures: 0,
            last_error: String::new(),
            jobs: Vec::new(),
        };
        let mut queues = self.alloc.queues();
        queues.push(queue.clone());
        self.alloc.set_queues(queues);
        tracing::info!(queue = %queue.spec.name, "allocation queue added");
        self.log_event(
            "queue-added",
            &queue.spec.name,
            None,
            format!("script {}", script.display()),
        );
        Ok(self.queue_status(&queue))
    }

    /// Every queue, with its jobs and their registered servers.
    pub fn list_queues(&self) -> Vec<v1::AllocQueue> {
        self.alloc
            .queues()
            .iter()
            .map(|q| self.queue_status(q))
            .collect()
    }

    /// Cancels a queue's live jobs and forgets it.
    pub async fn remove_queue(&self, name: &str) -> Result<v1::AllocQueue, MetaserverError> {
        let _one = self.alloc.changing.lock().await;
        let mut queues = self.alloc.queues();
        let index = queues
            .iter()
            .position(|q| q.spec.name == name)
            .ok_or_else(|| MetaserverError::UnknownQueue(name.to_string()))?;
        let live: Vec<String> = queues[index]
            .jobs
            .iter()
            .filter(|j| j.state.live())
            .map(|j| j.id.clone())
            .collect();
        self.alloc.batch.cancel(&live).await.map_err(refused)?;
        self.db.remove_queue(name).await?;
        let mut queue = queues.remove(index);
        self.alloc.set_queues(queues);
        for job in queue.jobs.iter_mut().filter(|j| j.state.live()) {
            job.state = JobState::Cancelled;
            job.reason = "the queue was removed".into();
        }
        self.log_event(
            "queue-removed",
            name,
            None,
            format!("cancelled {}", live.join(", ")),
        );
        Ok(self.queue_status(&queue))
    }

    /// Pauses a queue (it submits nothing), or resumes it with its failures forgotten.
    pub async fn pause_queue(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<v1::AllocQueue, MetaserverError> {
        let _one = self.alloc.changing.lock().await;
        let mut queues = self.alloc.queues();
        let queue = queues
            .iter_mut()
            .find(|q| q.spec.name == name)
            .ok_or_else(|| MetaserverError::UnknownQueue(name.to_string()))?;
        queue.paused = paused;
        if !paused {
            queue.failures = 0;
        }
        self.db
            .set_queue_state(name, queue.paused, queue.failures, &queue.last_error)
            .await?;
        let status = self.queue_status(queue);
        self.alloc.set_queues(queues);
        let kind = if paused { "paused" } else { "resumed" };
        self.log_event(kind, name, None, format!("queue {kind} by request"));
        Ok(status)
    }

    fn queue_status(&self, queue: &Queue) -> v1::AllocQueue {
        let now = unix_now();
        let state = self.state();
        queue.to_proto(|job| {
            state
                .registry
                .servers()
                .iter()
                .filter(|s| s.info.batch_job == job && state.registry.is_up(s, now) && !s.draining)
                .count() as u32
        })
    }
}
