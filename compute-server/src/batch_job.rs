//! What a server knows of the batch job it runs in: from Slurm's environment, its job
//! (`SLURM_ARRAY_JOB_ID`_`SLURM_ARRAY_TASK_ID` for an array's element, else `SLURM_JOB_ID`)
//! and the CPUs it was given (`SLURM_CPUS_ON_NODE`); from `squeue`, the time it has left,
//! so that it registers when its job ends and the metaserver places nothing past it.

use std::collections::HashMap;

/// The batch job, as the environment and Slurm tell it.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchJob {
    /// The id the allocation queue knows the job by.
    pub id: String,
    /// The id Slurm's commands take for it.
    pub slurm_id: String,
    pub cpus: Option<usize>,
}

/// The job in `env` (Slurm's variables), if the process runs in one.
pub fn from_env(env: &HashMap<String, String>) -> Option<BatchJob> {
    let slurm_id = env.get("SLURM_JOB_ID")?.trim().to_string();
    if slurm_id.is_empty() {
        return None;
    }
    let id = match (
        env.get("SLURM_ARRAY_JOB_ID"),
        env.get("SLURM_ARRAY_TASK_ID"),
    ) {
        (Some(array), Some(task)) => format!("{}_{}", array.trim(), task.trim()),
        _ => slurm_id.clone(),
    };
    let cpus = env
        .get("SLURM_CPUS_ON_NODE")
        .and_then(|c| c.trim().parse().ok())
        .filter(|&c: &usize| c > 0);
    Some(BatchJob { id, slurm_id, cpus })
}

/// Seconds in Slurm's `[days-]hours:minutes:seconds` (`squeue -o %L`: `4:59`, `1:00:00`,
/// `2-00:00:00`); `None` for `UNLIMITED`, `NOT_SET` or anything else.
pub fn remaining_seconds(text: &str) -> Option<f64> {
    let text = text.trim();
    let (days, clock) = match text.split_once('-') {
        Some((days, clock)) => (days.parse::<u64>().ok()?, clock),
        None => (0, text),
    };
    let parts: Vec<u64> = clock
        .split(':')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let (h, m, s) = match parts[..] {
        [m, s] => (0, m, s),
        [h, m, s] => (h, m, s),
        _ => return None,
    };
    Some((((days * 24 + h) * 60 + m) * 60 + s) as f64)
}

/// Asks Slurm how long the job has left (`squeue -h -j ID -o %L`); `None` when it cannot
/// tell (no `squeue`, or a job without a limit).
pub fn remaining_from_squeue(slurm_id: &str) -> Option<f64> {
    let output = std::process::Command::new("squeue")
        .args(["-h", "-j", slurm_id, "-o", "%L"])
        .output()
        .ok()?;
    if !output.status.success() {
        tracing::warn!(
            job = slurm_id,
            error = %String::from_utf8_lossy(&output.stderr).trim(),
            "squeue did not say how long the job has left"
        );
        return None;
    }
    remaining_seconds(&String::from_utf8_lossy(&output.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_times_and_jobs() {
        assert_eq!(remaining_seconds("4:59"), Some(299.0));
        assert_eq!(remaining_seconds("1:00:00\n"), Some(3600.0));
        assert_eq!(remaining_seconds("2-00:00:01"), Some(172_801.0));
        assert_eq!(remaining_seconds("UNLIMITED"), None);
        assert_eq!(remaining_seconds("1:2:3:4"), None);
        let env: HashMap<String, String> = [
            ("SLURM_JOB_ID", "17"),
            ("SLURM_ARRAY_JOB_ID", "16"),
            ("SLURM_ARRAY_TASK_ID", "1"),
            ("SLURM_CPUS_ON_NODE", "4"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let job = from_env(&env).unwrap();
        assert_eq!(
            (job.id.as_str(), job.slurm_id.as_str(), job.cpus),
            ("16_1", "17", Some(4))
        );
        assert_eq!(from_env(&HashMap::new()), None);
    }
}
