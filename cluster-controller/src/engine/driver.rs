//! One pass of the engine, the same for every mode: observe, judge, act; and again while the
//! steps succeed and the budget lasts.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::ValkeyClient;
use crate::valkey::cluster_nodes::NodeId;

use super::config::EngineConfig;
use super::decision::ClusterMode;
use super::error::EngineError;
use super::member::Member;
use super::mode::{ActionOutcome, Carried, Carrier, Decision, Mode, Scope, Verdict};

/// A Valkey step a pass took before its last decision.
#[derive(Debug)]
pub struct Taken<M: Mode = ClusterMode> {
    pub decision: Decision<M>,
    pub outcome: Result<ActionOutcome, EngineError>,
}

/// What one pass saw, decided and did: its last look, decision and outcome, and the steps it had
/// taken before them (see [`Engine::pass`]).
#[derive(Debug)]
pub struct Pass<M: Mode = ClusterMode> {
    /// Valkey steps taken, in order, before the last decision; each succeeded.
    pub earlier: Vec<Taken<M>>,
    pub observation: M::Observation,
    pub decision: Decision<M>,
    /// How the servers stand, from the same observation.
    pub health: M::Health,
    /// The node each member is bound to from now on (see [`bindings`]): the Kubernetes side
    /// keeps it and passes it back as [`Member::node_id`].
    pub bindings: BTreeMap<String, NodeId>,
    /// The result of executing a Valkey action; `Some(Ok(ActionOutcome::Delegated))` for a
    /// Kubernetes action; `None` when the decision was not to act, or acts once the Kubernetes
    /// side has recorded it ([`Carrier::ValkeyOnceRecorded`]: then [`Engine::act`]).
    pub outcome: Option<Result<ActionOutcome, EngineError>>,
    /// Where the pass's time went.
    pub timing: Timing,
}

impl<M: Mode> Pass<M> {
    /// Whether a step this pass took (and that Valkey carried out) was taken on the user's
    /// acknowledgement of a loss: the Kubernetes side records that it was acted on.
    pub fn spent_acknowledgement(&self) -> bool {
        self.earlier
            .iter()
            .any(|step| step.decision.spends_acknowledgement())
            || (self.decision.spends_acknowledgement()
                && matches!(self.outcome, Some(Ok(ref o)) if !matches!(o, ActionOutcome::Blocked(_))))
    }
}

/// Where one pass's time went, summed over its looks: asking the servers, deciding, acting, and
/// watching a short wait settle. What a slow formation or repair is made of.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timing {
    /// Observations taken (one per look).
    pub looks: u32,
    pub observe: Duration,
    pub decide: Duration,
    pub act: Duration,
    /// Sleeping between looks while a short wait settled.
    pub settle: Duration,
}

/// The engine of a mode (a cluster by default): a client and its settings. Holds no state
/// between passes.
#[derive(Debug, Clone)]
pub struct Engine<C, M: Mode = ClusterMode> {
    client: C,
    config: EngineConfig,
    mode: PhantomData<M>,
}

impl<C: ValkeyClient, M: Mode> Engine<C, M> {
    pub fn new(client: C, config: EngineConfig) -> Self {
        Self {
            client,
            config,
            mode: PhantomData,
        }
    }

    pub fn client(&self) -> &C {
        &self.client
    }

    /// Observes, decides and, for a Valkey action, acts; then, while the step succeeded and the
    /// budget lasts, looks again and takes the next one. Forming a cluster is a chain of quick
    /// steps (introductions, slots, replicas, admissions) with short waits between them
    /// (handshakes, a replica's first sync): taking them in one pass, and watching a short wait
    /// settle for a moment instead of coming back seconds later, is most of the difference
    /// between a cluster formed a fraction of a second after its pods are ready and one formed
    /// many seconds later. Each look is a fresh observation, and each decision the same pure
    /// function's, so a pass of many steps decides exactly as many passes of one step would.
    ///
    /// The pass stops at a Kubernetes step, a failure, a forced step (announced at once), a slot
    /// migration step (each moves data and has its own time budget; the status reports progress
    /// between them), a wait that is not short, or the end of its budget. Slot migration jobs
    /// that Valkey runs by itself are watched for up to `job_watch_budget`.
    pub async fn pass(&self, desired: &M::Desired, members: &[Member]) -> Pass<M> {
        self.pass_in(Scope::Everything, desired, members).await
    }

    /// [`Engine::pass`] with only the rules of `scope`: [`Scope::Safety`] when the Kubernetes
    /// side could not get in step with the spec this pass, and the rules that protect data must
    /// run all the same.
    pub async fn pass_in(&self, scope: Scope, desired: &M::Desired, members: &[Member]) -> Pass<M> {
        let started = Instant::now();
        let mut members = members.to_vec();
        let mut earlier = Vec::new();
        let mut timing = Timing::default();
        // The slots left to move at the pass's first look: a job watched to its end does not
        // keep the pass once some of them have landed, so the status says so before the others.
        let mut first_slots_to_move = None;
        loop {
            let look = Instant::now();
            let observation = M::observe(&self.client, &self.config, desired, &members).await;
            let observed = Instant::now();
            timing.looks += 1;
            timing.observe += observed - look;
            let Verdict {
                decision,
                bindings,
                health,
            } = M::judge(scope, desired, &members, &observation);
            timing.decide += observed.elapsed();
            let slots_left = M::slots_left(&health);
            if timing.looks == 1 {
                first_slots_to_move = slots_left;
            }
            let budget = if earlier.is_empty() {
                self.config.settle_budget
            } else {
                self.config.step_budget
            };
            let time_left = started.elapsed() < budget;
            let outcome = match &decision {
                Decision::Act { action, .. } if action.carrier() == Carrier::Valkey => {
                    let acting = Instant::now();
                    let outcome = self.act(&decision).await;
                    timing.act += acting.elapsed();
                    let chain = time_left
                        && !decision.is_forced()
                        && !action.moves_data()
                        && matches!(outcome, Ok(ActionOutcome::Done));
                    if chain {
                        bind(&mut members, &bindings);
                        earlier.push(Taken { decision, outcome });
                        continue;
                    }
                    Some(outcome)
                }
                Decision::Act { action, .. } if action.is_kubernetes() => {
                    Some(self.act(&decision).await)
                }
                // Recorded first by the Kubernetes side, which then calls `act`.
                Decision::Act { .. } => None,
                Decision::Wait { reason, .. }
                    if M::watches_job(*reason)
                        && earlier.is_empty()
                        && started.elapsed() < self.config.job_watch_budget
                        && !slots_landed(first_slots_to_move, slots_left) =>
                {
                    // A running job is watched longer than a short wait, and more closely: it
                    // ends once its keys have moved, and what follows (the next job, a leaving
                    // shard's removal) is then taken at once rather than at the next pass.
                    tracing::debug!(reason = %reason, "{}", decision.message());
                    let poll = watch_poll(self.config.job_poll, observed - look);
                    tokio::time::sleep(poll).await;
                    timing.settle += poll;
                    continue;
                }
                Decision::Wait { reason, .. } if time_left && M::settles_soon(*reason) => {
                    tracing::debug!(reason = %reason, "{}", decision.message());
                    tokio::time::sleep(self.config.settle_poll).await;
                    timing.settle += self.config.settle_poll;
                    continue;
                }
                other => {
                    tracing::debug!(reason = %other.reason(), "{}", other.message());
                    None
                }
            };
            tracing::debug!(
                steps = earlier.len() + usize::from(outcome.is_some()),
                took = ?started.elapsed(),
                "pass over"
            );
            // At rest the next look is many seconds away (15 s for a cluster): the connections
            // are closed rather than kept idle until then. A multiplexed connection holds about
            // 24 KiB (its read and write buffers), a third of the cluster-controller's heap over
            // a fleet at rest; opening them again costs a handshake per member and look.
            if matches!(decision, Decision::Steady(_)) {
                self.client.let_go();
            }
            return Pass {
                earlier,
                health,
                observation,
                decision,
                bindings,
                outcome,
                timing,
            };
        }
    }

    /// Carries out an Act decision (a Kubernetes action comes back as delegated), logging it:
    /// the driver's own steps, and a step the Kubernetes side has recorded
    /// ([`Carrier::ValkeyOnceRecorded`]).
    pub async fn act(&self, decision: &Decision<M>) -> Result<ActionOutcome, EngineError> {
        let Decision::Act {
            action,
            reason,
            message,
            ..
        } = decision
        else {
            return Ok(ActionOutcome::Delegated);
        };
        if decision.is_forced() {
            tracing::warn!(%reason, %action, forced = true, "{message}");
        } else {
            tracing::info!(%reason, %action, "{message}");
        }
        if action.is_kubernetes() {
            return Ok(ActionOutcome::Delegated);
        }
        let outcome = M::execute(&self.client, &self.config, action).await;
        match &outcome {
            Err(error) => tracing::warn!(%reason, %action, %error, "action failed"),
            Ok(ActionOutcome::Blocked(why)) => tracing::warn!(%reason, %action, "{why}"),
            Ok(ActionOutcome::Progress(what)) => tracing::debug!(%reason, "{what}"),
            Ok(_) => {}
        }
        outcome
    }
}

/// How long to wait before the next look at a running job: `poll`, or as long as the last look
/// took when that was longer (a look over hundreds of members is not repeated back to back, so
/// watching takes at most half of the pass's time).
fn watch_poll(poll: Duration, last_look: Duration) -> Duration {
    poll.max(last_look)
}

/// Whether some of the slots left at a pass's first look have landed since: several jobs run
/// at once, and the status reports each one's end (`status.progress`) instead of waiting for
/// the last.
fn slots_landed(first: Option<usize>, now: Option<usize>) -> bool {
    matches!((first, now), (Some(first), Some(now)) if now < first)
}

/// The members as bound after a step, for the next look of the same pass.
fn bind(members: &mut [Member], bindings: &BTreeMap<String, NodeId>) {
    for member in members {
        if let Some(id) = bindings.get(&member.name) {
            member.node_id = Some(id.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Credentials, RedisClient};

    #[test]
    fn a_job_is_looked_at_no_sooner_than_the_last_look_took() {
        let ms = Duration::from_millis;
        assert_eq!(watch_poll(ms(50), ms(3)), ms(50));
        assert_eq!(watch_poll(ms(50), ms(180)), ms(180));
    }

    fn assert_send<T: Send>(_: &T) {}

    /// Controllers run reconciles on a multi-threaded runtime: a pass must be `Send`.
    #[test]
    fn a_pass_can_run_on_any_thread() {
        let engine = Engine::<_, ClusterMode>::new(
            RedisClient::new(Default::default()),
            EngineConfig::for_credentials(&Credentials::none()),
        );
        let desired = crate::engine::Desired::new(1, 0);
        let pass = engine.pass(&desired, &[]);
        assert_send(&pass);
        let replication = Engine::<_, crate::replication::engine::ReplicationMode>::new(
            RedisClient::new(Default::default()),
            EngineConfig::for_credentials(&Credentials::none()),
        );
        let asked = crate::replication::engine::Asked::default();
        let pass = replication.pass(&asked, &[]);
        assert_send(&pass);
    }

    /// A pass watching three jobs ends when the first lands, so `status.progress` shows a step
    /// between the start and the end (it did not, when every job ended within one watch).
    #[test]
    fn a_watch_ends_once_some_slots_landed() {
        assert!(!slots_landed(Some(6553), Some(6553)), "nothing landed yet");
        assert!(
            slots_landed(Some(6553), Some(4369)),
            "one job of three landed"
        );
        assert!(!slots_landed(None, Some(10)), "no figure at the first look");
        assert!(!slots_landed(Some(10), None), "no figure now");
        assert!(
            !slots_landed(Some(10), Some(12)),
            "more to move is not progress"
        );
    }
}
