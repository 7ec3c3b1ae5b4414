//! Item 7: the quick start works as written. `make demo`'s last step (hack/demo.sh: the chart
//! installed, the example applied, waited for) runs for real, then a user follows the example's
//! own instruction verbatim, `kubectl apply -n default -f examples/valkeycluster.yaml`, and the
//! cluster it names is Ready: the demo's release watches the namespace the instruction uses.
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
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_quick_start_instruction_works_verbatim_after_the_demo() -> Result<()> {
    let _turn = e2e::pool::heavy().await;
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
