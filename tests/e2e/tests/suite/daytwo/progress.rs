//! Item 6: long changes report how far they have got, in the status and in `-o wide`.

use std::time::Duration;

use e2e::cluster::ClusterFixture;
use e2e::record::Record;
use e2e::{Result, check};
use valkey_api::v1alpha1::Progress;

const FORM: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread")]
async fn a_scale_out_reports_slots_moved_growing_to_complete() -> Result<()> {
    let c = ClusterFixture::start("d2-progress", "prog", "{shards: 3, replicas: 0}").await?;
    c.wait_ready(FORM).await?;
    let before = c.write_keys("pre", 10_000).await?;
    // Every version of the cluster from here on: a poll could miss the steps between.
    let record = Record::start(c.api(), None).await?;
    c.patch_spec(serde_json::json!({"shards": 5})).await?;
    let done = c
        .wait_status(Duration::from_secs(300), "5 shards ready", |s| {
            s.state == Some(valkey_api::v1alpha1::ClusterState::Ready)
                && s.shards == 5
                && s.progress.as_ref().is_some_and(|p| p.done == p.total)
        })
        .await?;
    record.caught_up(&done, Duration::from_secs(30)).await?;
    record.complete()?;
    let seen: Vec<Progress> = record
        .versions_of(&c.name)
        .into_iter()
        .filter_map(|v| v.object.status.and_then(|s| s.progress))
        .filter(|p| p.operation == "ScalingOut")
        .collect();
    let figures: Vec<(i32, i32)> = seen.iter().map(|p| (p.done, p.total)).collect();
    eprintln!("scale-out progress seen: {figures:?}");
    // 3 -> 5 shards: each new shard takes a fifth of the 16384 slots.
    let total = seen.last().map_or(0, |p| p.total);
    check(
        (6550..=6560).contains(&total),
        format!("total {total} is not the two fifths of the slots that move: {figures:?}"),
    )?;
    check(
        seen.first().is_some_and(|p| p.done == 0),
        format!("the scale-out did not start from 0: {figures:?}"),
    )?;
    check(
        seen.windows(2)
            .all(|w| w[1].done >= w[0].done && w[1].total >= w[0].total),
        format!("progress went back: {figures:?}"),
    )?;
    // A step between the start and the end is reported when one job lands before the others
    // (the engine's pass ends at the first landing: `a_watch_ends_once_some_slots_landed`); a
    // move of 10,000 keys can land every job between two looks, so this test does not ask for
    // one (CI saw 0 then done).
    check(
        seen.last()
            .is_some_and(|p| p.done == p.total && p.unit == "slots"),
        format!("the scale-out did not end complete: {figures:?}"),
    )?;
    // The same figure in the PROGRESS column of `-o wide`.
    let wide =
        c.ns.kubectl(&["get", "valkeycluster", &c.name, "-o", "wide"])
            .await?;
    check(
        wide.contains("PROGRESS") && wide.contains(&format!("{total}/{total} slots moved")),
        format!("kubectl get -o wide:\n{wide}"),
    )?;
    c.verify(&before).await
}
