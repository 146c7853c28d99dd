//! Where a run copies a replicated handle's new value before its commit: to the servers of
//! the handle's old copies (they held its value, so they have its room), other than the
//! writer's, up to the handle's `replicas`. A value kept only where it was written until
//! the commit's replicas are made would be lost with that server meanwhile (seen under
//! `ninf chaos`); copied first, a loss before the copy sends its writer back to run again,
//! the old copies being untouched until the commit (docs/data.md, "Copies the grid makes").

use ninf_proto::v1;

use super::DataUses;

impl DataUses {
    /// For the output `(task, parameter)` that becomes a handle's value, kept as `object`:
    /// the servers to copy it to before the commit, `made` being those it was copied to
    /// already. None for a handle that is not persistent or wants one copy.
    pub(crate) fn written_copy_targets(
        &self,
        (task, parameter): (usize, u32),
        object: &v1::ObjectRef,
        made: &[String],
    ) -> Vec<String> {
        let Some(info) = self
            .written_handle(task, parameter)
            .and_then(|id| self.handles.get(id))
        else {
            return Vec::new();
        };
        let Some(spec) = info.spec.as_ref() else {
            return Vec::new();
        };
        if spec.mode != v1::DataMode::Persistent as i32 {
            return Vec::new();
        }
        let wanted = (spec.replicas.max(1) as usize)
            .saturating_sub(1)
            .saturating_sub(made.len());
        let mut targets: Vec<String> = Vec::new();
        for copy in &info.copies {
            let server = &copy.server;
            if *server != object.server && !made.contains(server) && !targets.contains(server) {
                targets.push(server.clone());
            }
        }
        targets.truncate(wanted);
        targets
    }

    /// The handle the output `(task, parameter)` writes, if it writes one.
    pub(crate) fn written_handle(&self, task: usize, parameter: u32) -> Option<&str> {
        self.writes
            .iter()
            .find(|(t, p, _)| *t == task && *p == parameter)
            .map(|(_, _, id)| id.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writing(mode: v1::DataMode, replicas: u32, on: &[&str]) -> DataUses {
        let info = v1::DataInfo {
            id: "h".into(),
            spec: Some(v1::DataSpec {
                mode: mode as i32,
                replicas,
                bytes: 8,
                ..Default::default()
            }),
            copies: on
                .iter()
                .map(|s| v1::DataCopy {
                    server: (*s).into(),
                    object_id: format!("old@{s}"),
                })
                .collect(),
            ..Default::default()
        };
        DataUses {
            writes: vec![(1, 0, "h".into())],
            handles: [("h".to_string(), info)].into_iter().collect(),
            ..DataUses::default()
        }
    }

    fn on(server: &str) -> v1::ObjectRef {
        v1::ObjectRef {
            server: server.into(),
            object_id: "new".into(),
        }
    }

    #[test]
    fn a_new_value_goes_to_the_old_copies_servers_but_the_writers_up_to_its_replicas() {
        let uses = writing(v1::DataMode::Persistent, 2, &["a", "b"]);
        assert_eq!(uses.written_copy_targets((1, 0), &on("a"), &[]), ["b"]);
        // Written elsewhere (the writer moved after a fault): one of the old servers.
        assert_eq!(uses.written_copy_targets((1, 0), &on("c"), &[]), ["a"]);
        // Copied already: nothing more.
        assert!(
            uses.written_copy_targets((1, 0), &on("a"), &["b".into()])
                .is_empty()
        );
        let three = writing(v1::DataMode::Persistent, 3, &["a", "b", "c"]);
        assert_eq!(
            three.written_copy_targets((1, 0), &on("b"), &[]),
            ["a", "c"]
        );
        assert_eq!(uses.written_handle(1, 0), Some("h"));
        assert_eq!(uses.written_handle(0, 0), None);
    }

    #[test]
    fn one_copy_handles_sticky_handles_and_other_outputs_are_not_copied() {
        let one = writing(v1::DataMode::Persistent, 1, &["a"]);
        assert!(one.written_copy_targets((1, 0), &on("a"), &[]).is_empty());
        let sticky = writing(v1::DataMode::Sticky, 2, &["a", "b"]);
        assert!(
            sticky
                .written_copy_targets((1, 0), &on("a"), &[])
                .is_empty()
        );
        let uses = writing(v1::DataMode::Persistent, 2, &["a", "b"]);
        assert!(uses.written_copy_targets((0, 0), &on("a"), &[]).is_empty());
    }
}
