//! Item 7: the quick start works as written. `make demo`'s last step (hack/demo.sh: the chart
//! installed, the example applied, waited for) runs for real, then a user follows the example's
//! own instruction verbatim, `kubectl apply -n default -f examples/valkeycluster.yaml`, and the
//! cluster it names is Ready: the demo's release watches the namespace the instruction uses.
//! Then every other example (one per feature a user can turn on) is applied the same way, each
//! as its own instruction says, and each ValkeyCluster and ValkeyReplication it makes is Ready,
//! each ValkeyBackup (of the quick start's cluster, into localkube's object store) Completed.
//!
//! Owns the `default` namespace's cluster-sample and the release `valkey-operator` while it runs,
//! and removes them (and the volumes) afterwards, failed or not.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use e2e::helm::{helm_program, run};
use e2e::{Poll, Result, check, kubectl_program, repo_root, wait_until};
use kube::Api;
use valkey_api::v1alpha1::{ClusterState, ValkeyCluster};

/// Removes what the demo and the user made, also when the test fails.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let kubectl = kubectl_program();
        let quiet = |program: &Path, args: &[&str]| {
            let _ = Command::new(program).args(args).output();
        };
        let finalizers_off = || {
            // A backup the operator could not finish deleting keeps no namespace from going.
            let listed = Command::new(&kubectl)
                .args(["get", "valkeybackup", "-n", "default", "-o", "name"])
                .output();
            for name in listed
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
                .lines()
            {
                quiet(
                    &kubectl,
                    &[
                        "patch",
                        name,
                        "-n",
                        "default",
                        "--type=merge",
                        "-p",
                        r#"{"metadata":{"finalizers":null}}"#,
                    ],
                );
            }
        };
        // Backups first, while the operator runs: it deletes their objects and their finalizer.
        quiet(
            &kubectl,
            &[
                "delete",
                "valkeybackup",
                "--all",
                "-n",
                "default",
                "--wait=true",
                "--timeout=60s",
            ],
        );
        quiet(
            &kubectl,
            &[
                "delete",
                "valkeycluster",
                "cluster-sample",
                "-n",
                "default",
                "--wait=true",
                "--timeout=120s",
            ],
        );
        quiet(
            &helm_program(),
            &[
                "uninstall",
                "valkey-operator",
                "-n",
                "valkey-operator-system",
                "--wait",
            ],
        );
        finalizers_off();
        quiet(
            &kubectl,
            &[
                "delete",
                "pvc",
                "-n",
                "default",
                "-l",
                "valkey.io/node",
                "--wait=false",
            ],
        );
        quiet(
            &kubectl,
            &[
                "delete",
                "secret",
                "-n",
                "default",
                "cluster-sample-password",
                "cluster-sample-acl",
                "--ignore-not-found",
            ],
        );
        // The other examples, then the Secrets they or the operator made (kept on deletion).
        for example in examples() {
            quiet(
                &kubectl,
                &[
                    "delete",
                    "-n",
                    "default",
                    "-f",
                    &example.display().to_string(),
                    "--ignore-not-found",
                    "--wait=true",
                    "--timeout=120s",
                ],
            );
        }
        for label in ["valkey.io/cluster", "valkey.io/replication"] {
            quiet(
                &kubectl,
                &[
                    "delete",
                    "secret,pvc",
                    "-n",
                    "default",
                    "-l",
                    label,
                    "--wait=false",
                ],
            );
        }
    }
}

/// Every example but the quick start's own, in the order a reader applies them: what stands
/// alone first, then the backups of it, then what is restored from those (a backup of an object
/// that does not exist yet fails at once, by design), each group by name.
fn examples() -> Vec<std::path::PathBuf> {
    let dir = repo_root().join("examples");
    let mut found: Vec<_> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
                .filter(|p| !p.ends_with("valkeycluster.yaml"))
                .collect()
        })
        .unwrap_or_default();
    let stage = |path: &std::path::PathBuf| {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains("restoreFrom:") {
            2
        } else if text.contains("kind: ValkeyBackup\n") {
            1
        } else {
            0
        }
    };
    found.sort_by_cached_key(|p| (stage(p), p.clone()));
    found
}

/// The ValkeyClusters, ValkeyReplications, ValkeyBackups and ValkeyBackupSchedules an example
/// file makes: (kind, name).
fn parents_in(text: &str) -> Vec<(String, String)> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|doc| serde_yaml::Value::deserialize(doc).ok())
        .filter_map(|doc| {
            let kind = doc.get("kind")?.as_str()?.to_owned();
            let name = doc.get("metadata")?.get("name")?.as_str()?.to_owned();
            matches!(
                kind.as_str(),
                "ValkeyCluster" | "ValkeyReplication" | "ValkeyBackup" | "ValkeyBackupSchedule"
            )
            .then_some((kind, name))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_quick_start_instruction_works_verbatim_after_the_demo() -> Result<()> {
    let _turn = e2e::pool::heavy().await;
    // Its examples back up into localkube's object store (see `e2e::pool::object_store`).
    let _store = e2e::pool::object_store().await;
    let _cleanup = Cleanup;
    let root = repo_root();
    let demo = run(
        Path::new("bash"),
        &[&root.join("hack/demo.sh").display().to_string()],
    )
    .await?;
    check(
        demo.success,
        format!("hack/demo.sh failed:\n{}\n{}", demo.stdout, demo.stderr),
    )?;

    // The example's own instruction, as written in it.
    let example = std::fs::read_to_string(root.join("examples/valkeycluster.yaml"))
        .map_err(|e| e2e::E2eError::Check(format!("examples/valkeycluster.yaml: {e}")))?;
    let instruction = "kubectl apply -n default -f examples/valkeycluster.yaml";
    check(
        example.contains(instruction),
        format!("the example no longer says {instruction:?}"),
    )?;
    let applied = run(
        &kubectl_program(),
        &[
            "apply",
            "-n",
            "default",
            "-f",
            &root
                .join("examples/valkeycluster.yaml")
                .display()
                .to_string(),
        ],
    )
    .await?;
    check(
        applied.success,
        format!("{}{}", applied.stdout, applied.stderr),
    )?;

    let clusters: Api<ValkeyCluster> = Api::namespaced(e2e::client().await?, "default");
    wait_until(
        Duration::from_secs(120),
        "cluster-sample in default Ready",
        || {
            let clusters = clusters.clone();
            async move {
                let c = clusters.get("cluster-sample").await?;
                Ok(match c.status.as_ref() {
                    Some(s) if s.state == Some(ClusterState::Ready) && s.ready_shards == 3 => {
                        Poll::Ready(())
                    }
                    other => Poll::NotYet(format!("{other:?}")),
                })
            }
        },
    )
    .await?;
    every_example_works_verbatim().await?;
    // NOTES.txt speaks of the same namespace.
    let notes = run(
        &helm_program(),
        &[
            "get",
            "notes",
            "valkey-operator",
            "-n",
            "valkey-operator-system",
        ],
    )
    .await?;
    check(
        notes.stdout.contains("kubectl apply -n default -f -")
            && notes.stdout.contains("watching default"),
        notes.stdout,
    )
}

/// Every other example, applied verbatim as its own instruction says, after the demo's setup:
/// each ValkeyCluster and ValkeyReplication it makes becomes Ready, each ValkeyBackup Completed.
/// All at once, so the wait is one formation long.
async fn every_example_works_verbatim() -> Result<()> {
    use valkey_api::v1alpha1::{
        BackupPhase, ReplicationState, ValkeyBackup, ValkeyBackupSchedule, ValkeyReplication,
    };
    let root = repo_root();
    let mut parents = Vec::new();
    for example in examples() {
        let relative = example
            .strip_prefix(&root)
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let text = std::fs::read_to_string(&example)
            .map_err(|e| e2e::E2eError::Check(format!("{relative}: {e}")))?;
        let instruction = format!("kubectl apply -n default -f {relative}");
        check(
            text.contains(&instruction),
            format!("{relative} does not say how to apply it ({instruction:?})"),
        )?;
        let made = parents_in(&text);
        check(
            !made.is_empty(),
            format!(
                "{relative} makes no ValkeyCluster, ValkeyReplication, ValkeyBackup or schedule"
            ),
        )?;
        let applied = run(
            &kubectl_program(),
            &[
                "apply",
                "-n",
                "default",
                "-f",
                &example.display().to_string(),
            ],
        )
        .await?;
        check(
            applied.success,
            format!("{relative}: {}{}", applied.stdout, applied.stderr),
        )?;
        parents.extend(
            made.into_iter()
                .map(|(kind, name)| (relative.clone(), kind, name)),
        );
    }
    let client = e2e::client().await?;
    let clusters: Api<ValkeyCluster> = Api::namespaced(client.clone(), "default");
    let replications: Api<ValkeyReplication> = Api::namespaced(client.clone(), "default");
    let backups: Api<ValkeyBackup> = Api::namespaced(client.clone(), "default");
    let schedules: Api<ValkeyBackupSchedule> = Api::namespaced(client, "default");
    wait_until(
        Duration::from_secs(300),
        "every example's cluster or replication Ready, every backup Completed",
        || {
            let (clusters, replications, backups, schedules, parents) =
                (&clusters, &replications, &backups, &schedules, &parents);
            async move {
                let mut waiting = Vec::new();
                for (file, kind, name) in parents {
                    let ready = if kind == "ValkeyBackup" {
                        let status = backups.get(name).await?.status;
                        let phase = status.as_ref().and_then(|s| s.phase);
                        if phase == Some(BackupPhase::Failed) {
                            return Err(e2e::E2eError::Check(format!(
                                "ValkeyBackup {name} ({file}) Failed: {:?}",
                                status.and_then(|s| s.message)
                            )));
                        }
                        phase == Some(BackupPhase::Completed)
                    } else if kind == "ValkeyBackupSchedule" {
                        // Its backups come at its times; now it must parse and name the next.
                        let status = schedules.get(name).await?.status.unwrap_or_default();
                        status.next_schedule_time.is_some()
                            && status
                                .conditions
                                .iter()
                                .flatten()
                                .any(|c| c.type_ == "Ready" && c.status == "True")
                    } else if kind == "ValkeyCluster" {
                        clusters
                            .get(name)
                            .await?
                            .status
                            .is_some_and(|s| s.state == Some(ClusterState::Ready))
                    } else {
                        replications
                            .get(name)
                            .await?
                            .status
                            .is_some_and(|s| s.state == Some(ReplicationState::Ready))
                    };
                    if !ready {
                        waiting.push(format!("{kind} {name} ({file})"));
                    }
                }
                Ok(if waiting.is_empty() {
                    Poll::Ready(())
                } else {
                    Poll::NotYet(format!("not Ready: {}", waiting.join(", ")))
                })
            }
        },
    )
    .await?;
    eprintln!(
        "examples: {} objects from {} files Ready",
        parents.len(),
        examples().len()
    );
    Ok(())
}
