//! What a scenario runs on, of either kind: everything the harness asks of it, answered the way
//! the kind allows. A scenario's run branches on its kind here only.

use std::collections::BTreeMap;
use std::time::Duration;

use valkey_api::v1alpha1::{ClusterState, Role};

use super::writer::{Acks, ReplicatedWriter};
use super::{Kind, Operation};
use crate::cluster::{Acknowledged, ClusterFixture};
use crate::operator::ControllerProcess;
use crate::replication::{self, ReplicationFixture, ServiceWriter};
use crate::valkey_py::{Login, PyWriter, none_lost};
use crate::{E2eError, Poll, Result, TestNamespace, wait_until};

/// A ValkeyCluster or a ValkeyReplication under test.
pub enum Fixture {
    Cluster(ClusterFixture),
    Replication(ReplicationFixture),
}

impl Fixture {
    /// Starts the namespace, both controllers and the object `chaos` of `kind` with `spec`.
    pub async fn start(kind: Kind, prefix: &str, spec: &str) -> Result<Self> {
        Ok(match kind {
            Kind::Cluster => Fixture::Cluster(ClusterFixture::start(prefix, "chaos", spec).await?),
            Kind::Replication => {
                Fixture::Replication(ReplicationFixture::start(prefix, "chaos", spec).await?)
            }
        })
    }

    pub fn ns(&self) -> &TestNamespace {
        match self {
            Fixture::Cluster(c) => &c.ns,
            Fixture::Replication(r) => &r.ns,
        }
    }

    /// The cluster, for the faults only a cluster has.
    pub fn cluster(&self) -> Result<&ClusterFixture> {
        match self {
            Fixture::Cluster(c) => Ok(c),
            Fixture::Replication(_) => Err(E2eError::Check(
                "a fault for clusters only, on a replication".to_owned(),
            )),
        }
    }

    /// Waits until the object is Ready. A replication is waited for as after a change: writes
    /// and reads go through its Service, which follows its status a moment later.
    pub async fn wait_ready(&self, within: Duration) -> Result<()> {
        match self {
            Fixture::Cluster(c) => c.wait_ready(within).await.map(|_| ()),
            Fixture::Replication(r) => r.wait_done(within).await,
        }
    }

    /// Writes `count` keys `<prefix>:<n>` before the scenario, every one acknowledged.
    pub async fn write_keys(&self, prefix: &str, count: usize) -> Result<BTreeMap<String, String>> {
        match self {
            Fixture::Cluster(c) => c.write_keys(prefix, count as u64).await,
            // Through the read/write Service, as every client of a replication writes.
            Fixture::Replication(r) => r.write_confirmed(prefix, count).await,
        }
    }

    /// A writer that reaches the primaries as a client of the kind does: a cluster client that
    /// follows MOVED, or the read/write Service (with Sentinel: the primary the Sentinels name).
    pub async fn start_writer(&self, prefix: &str) -> Result<Writer> {
        Ok(match self {
            Fixture::Cluster(c) => Writer::Cluster(cluster_writer(c, prefix).await?),
            Fixture::Replication(r) => Writer::Service(r.start_writer(prefix).await?),
        })
    }

    /// With Sentinel: valkey-py's Sentinel client writing beside the scenario's writer, once it
    /// writes (the application the mode is for; see [`crate::valkey_py`]).
    pub async fn start_sentinel_client(&self) -> Result<Option<PyWriter>> {
        let Fixture::Replication(r) = self else {
            return Ok(None);
        };
        if r.sentinel_master().await?.is_none() {
            return Ok(None);
        }
        let login = Login::of(r).await?;
        let writer = PyWriter::start(r, &login, "py").await?;
        writer.wait_writing(r, 20).await?;
        Ok(Some(writer))
    }

    /// What valkey-py's Sentinel client saw, stopped; why it fails the scenario, if it does:
    /// a write it had confirmed (`WAIT 1`) and the replication lost, or too few confirmed.
    pub async fn finish_sentinel_client(&self, writer: PyWriter, name: &str) -> Option<String> {
        let Fixture::Replication(r) = self else {
            return None;
        };
        let run = match writer.finish().await {
            Ok(run) => run,
            Err(e) => return Some(format!("valkey-py: {e}")),
        };
        eprintln!(
            "chaos {name}: valkey-py acknowledged {}, confirmed {}, errors {:?}, longest gap {:.2} s",
            run.acked,
            run.confirmed.len(),
            run.errors,
            run.longest_gap_s
        );
        if run.confirmed.len() < 20 {
            return Some(format!(
                "valkey-py confirmed {} writes only",
                run.confirmed.len()
            ));
        }
        none_lost(r, &run)
            .await
            .err()
            .map(|e| format!("valkey-py: {e}"))
    }

    /// Starts the operation: a merge patch of the spec.
    pub async fn apply(&self, operation: &Operation) -> Result<()> {
        let patch = match operation {
            Operation::Idle => return Ok(()),
            Operation::Shards(n) => serde_json::json!({ "shards": n }),
            Operation::Replicas(n) => serde_json::json!({ "replicas": n }),
            Operation::Image(image) => serde_json::json!({ "image": image }),
            // Members are named `<name>-<index>`.
            Operation::Primary(index) => {
                serde_json::json!({ "primary": format!("{}-{index}", self.name()) })
            }
        };
        match self {
            Fixture::Cluster(c) => c.patch_spec(patch).await.map(|_| ()),
            Fixture::Replication(r) => r.patch_spec(patch).await.map(|_| ()),
        }
    }

    fn name(&self) -> &str {
        match self {
            Fixture::Cluster(c) => &c.name,
            Fixture::Replication(r) => &r.name,
        }
    }

    /// The pod of a primary: for a cluster any member Valkey says is one, for a replication the
    /// one its status names (the one its read/write Service selects).
    pub async fn primary_pod(&self) -> Result<String> {
        match self {
            Fixture::Cluster(c) => {
                let primary = c.member_with_role(Role::Primary).await?;
                primary
                    .status
                    .and_then(|s| s.pod_name)
                    .ok_or_else(|| E2eError::Check("the primary has no pod".to_owned()))
            }
            Fixture::Replication(r) => r.pod_of(&r.primary().await?.0).await,
        }
    }

    /// Kills the cluster-controller (SIGKILL) and starts it again with the flags it had.
    pub async fn restart_cluster_controller(&mut self) -> Result<()> {
        let (controller, ns, args) = match self {
            Fixture::Cluster(c) => (&mut c.cluster_controller, &c.ns, &[][..]),
            Fixture::Replication(r) => (
                &mut r.cluster_controller,
                &r.ns,
                replication::CLUSTER_CONTROLLER_ARGS,
            ),
        };
        controller.kill().await?;
        *controller = ControllerProcess::start("cluster-controller", ns, args).await?;
        Ok(())
    }

    /// Stops the cluster-controller (SIGSTOP) until the guard drops: held down, not killed, as a
    /// node that froze or a controller that hangs.
    pub fn hold_cluster_controller(&self) -> Result<Held> {
        let controller = match self {
            Fixture::Cluster(c) => &c.cluster_controller,
            Fixture::Replication(r) => &r.cluster_controller,
        };
        let pid = controller
            .pid()
            .ok_or_else(|| E2eError::Check("the cluster-controller has no process".to_owned()))?;
        signal(pid, "STOP")?;
        Ok(Held { pid })
    }

    /// The Secret holding the clients' password, as the status names it.
    pub async fn password_secret(&self) -> Result<String> {
        let named = match self {
            Fixture::Cluster(c) => c
                .api()
                .get(&c.name)
                .await?
                .status
                .and_then(|s| s.password_secret_name),
            Fixture::Replication(r) => r.get().await?.status.and_then(|s| s.password_secret_name),
        };
        named.ok_or_else(|| E2eError::Check("the status names no password Secret".to_owned()))
    }

    /// Waits until the object is Ready for its spec with every member on its desired revision.
    pub async fn wait_done(&self, within: Duration) -> Result<()> {
        match self {
            Fixture::Cluster(c) => wait_cluster_done(c, within).await,
            Fixture::Replication(r) => r.wait_done(within).await,
        }
    }

    /// The keys of `expected` that do not read back with their value.
    pub async fn missing<'a>(
        &self,
        expected: impl Iterator<Item = (&'a String, &'a String)>,
    ) -> Result<Vec<String>> {
        match self {
            Fixture::Cluster(c) => c.missing(expected).await,
            Fixture::Replication(r) => r.missing(expected).await,
        }
    }

    /// The kind's own consistency check: `valkey-cli --cluster check` against one member, as the
    /// operator's tools would run it; for a replication, one primary and every other member its
    /// replica, on Valkey's word, within 30 s (the status may still say Ready from before a
    /// restart in place), and with Sentinel every Sentinel naming that primary. Why it failed, if
    /// it did, in a line for the report (the details, many lines, go to stderr).
    pub async fn check(&self) -> Option<String> {
        let failed = |check: &str, details: String| {
            eprintln!("{} {check}: {details}", self.ns().name);
            Some(format!("{check} failed"))
        };
        match self {
            Fixture::Cluster(c) => match c.cluster_check().await {
                Ok(out) if out.contains("[OK] All 16384 slots covered") => None,
                Ok(out) => failed("valkey-cli --cluster check", out),
                Err(e) => failed("valkey-cli --cluster check", e.to_string()),
            },
            Fixture::Replication(r) => match r.wait_roles(Duration::from_secs(30)).await {
                Ok(()) => match r.wait_sentinels_agree(Duration::from_secs(30)).await {
                    Ok(()) => None,
                    Err(e) => failed("the Sentinels check", e.to_string()),
                },
                Err(e) => failed("the roles check", e.to_string()),
            },
        }
    }
}

async fn cluster_writer(c: &ClusterFixture, prefix: &str) -> Result<ReplicatedWriter> {
    let conn = c.client().await?;
    let seeds = c.seed_urls().await?;
    let password = c.password().await?;
    let connect: super::writer::Connect = std::sync::Arc::new(move || {
        let (seeds, password) = (seeds.clone(), password.clone());
        Box::pin(async move { crate::cluster::connect(seeds, password).await.ok() })
    });
    Ok(ReplicatedWriter::start(prefix, conn, connect))
}

/// Waits until the cluster is Ready for its spec with every member on its desired revision.
async fn wait_cluster_done(c: &ClusterFixture, within: Duration) -> Result<()> {
    wait_until(within, "Ready, every member rolled", || async {
        let cluster = c.api().get(&c.name).await?;
        let ready = cluster.status.as_ref().is_some_and(|s| {
            s.state == Some(ClusterState::Ready)
                && s.observed_generation == cluster.metadata.generation
                && s.ready_shards == cluster.spec.shards
        });
        let wanted = usize::try_from(cluster.spec.shards * (cluster.spec.replicas + 1));
        let rolled = crate::members_rolled(&c.nodes().await?, wanted.unwrap_or(0));
        Ok(if ready && rolled {
            Poll::Ready(())
        } else {
            Poll::NotYet(format!(
                "{:?}",
                cluster.status.map(|s| (s.state, s.reason, s.message))
            ))
        })
    })
    .await
}

/// The cluster-controller held down (SIGSTOP); it goes on (SIGCONT) when this drops.
#[must_use = "the controller goes on as soon as this guard is dropped"]
pub struct Held {
    pid: u32,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Err(e) = signal(self.pid, "CONT") {
            eprintln!("letting the cluster-controller go on: {e}");
        }
    }
}

fn signal(pid: u32, name: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .map_err(|source| E2eError::Spawn {
            program: "kill".to_owned(),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(E2eError::Check(format!("kill -{name} {pid}: {status}")))
    }
}

/// The running writer of either kind; both count the same [`Acks`].
pub enum Writer {
    Cluster(ReplicatedWriter),
    Service(ServiceWriter),
}

impl Writer {
    /// Stops the writer and returns what it saw.
    pub async fn stop(self) -> Acks {
        match self {
            Writer::Cluster(w) => w.stop().await,
            Writer::Service(w) => w.stop().await,
        }
    }
}

impl Acknowledged for Writer {
    async fn acknowledged(&self) -> usize {
        match self {
            Writer::Cluster(w) => w.acked().await,
            Writer::Service(w) => w.acked().await,
        }
    }
}
