//! The report stage: what was observed becomes the ValkeyNode's status. Pure; the conditions keep
//! their lastTransitionTime unless their status flips, so an unchanged world yields an identical
//! status and no write.

use k8s_openapi::api::core::v1::{ContainerStateWaiting, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use plumbing::conditions::{ConditionStatus, set_condition};
use valkey_api::contract::{EXPORTER_CONTAINER, VALKEY_CONTAINER};
use valkey_api::v1alpha1::{Role, StatusReason, ValkeyNodeStatus};

use crate::live::apply::LiveSettingsOutcome;
use crate::names::REVISION_ANNOTATION;
use crate::probe::Answer;

/// The pod label that carries its node's zone (set by the API server's PodTopologyLabels admission).
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

pub const READY: &str = valkey_api::contract::READY_CONDITION;
pub const WORKLOAD_READY: &str = "WorkloadReady";
pub const PVC_READY: &str = "PersistentVolumeClaimReady";
pub const CREDENTIALS: &str = "Credentials";
pub const POD_UP_TO_DATE: &str = "PodUpToDate";
pub const CONFIG_APPLIED: &str = valkey_api::contract::CONFIG_APPLIED_CONDITION;
pub const INITIAL_DATA: &str = "InitialData";
/// InitialData=False (and Ready=False): the restore init container failed; the message is its own.
pub const INITIAL_DATA_FAILED: StatusReason = StatusReason::InitialDataFailed;

/// Everything one reconcile pass saw.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    pub generation: Option<i64>,
    pub workload_name: &'a str,
    pub workload: WorkloadState,
    /// `None` when the node has no persistence.
    pub pvc: Option<PvcState>,
    /// `None` when the node has no credentials.
    pub credentials: Option<CredentialsState>,
    pub pod: Option<&'a Pod>,
    /// `None` when Valkey was not asked (no running pod).
    pub valkey: Option<Answer>,
    pub desired_revision: &'a str,
    /// Whether the parent allows the desired revision to run now.
    pub restart_allowed: bool,
    /// The live settings on the running server; `None` when it was not asked.
    pub live_config: Option<LiveSettingsOutcome>,
    /// The object of `spec.initialData`, when the spec has one.
    pub initial_data: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum WorkloadState {
    Missing,
    Present {
        ready_replicas: i32,
    },
    /// Applying it failed; the message says why.
    Rejected(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum PvcState {
    Missing,
    /// Not bound (yet, or any more).
    Phase {
        name: String,
        phase: String,
    },
    /// Bound; `resize` when it asks for more than its volume holds.
    Bound {
        name: String,
        resize: Option<Resize>,
    },
    Rejected(String),
    /// The API refused to grow the claim: its StorageClass (if any) does not allow expansion.
    ExpansionNotSupported {
        name: String,
        class: Option<String>,
        wanted: String,
        holds: String,
        answer: String,
    },
}

/// A claim growing from what its volume holds to what it asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Resize {
    pub from: String,
    pub to: String,
    pub step: ResizeStep,
}

/// How far a resize is, as the claim's status tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum ResizeStep {
    /// No resizer has taken it up yet.
    Pending,
    /// The storage grows the volume.
    Controller,
    /// The volume has grown; the kubelet grows its file system next.
    FileSystem,
    /// The storage gave up; its words.
    Failed(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum CredentialsState {
    Found,
    SecretMissing { secret: String },
    KeyMissing { secret: String, key: String },
}

/// The new status, starting from the previous one so unchanged conditions keep their times.
pub fn compute(
    previous: Option<&ValkeyNodeStatus>,
    o: &Observed<'_>,
    now: &Time,
) -> ValkeyNodeStatus {
    // A terminating pod no longer speaks for the node: its address and role are not reported.
    let pod = o.pod.filter(|p| p.metadata.deletion_timestamp.is_none());
    let role = role(o.valkey.as_ref(), pod);
    let ready = ready(o, pod, role);
    let is_ready = ready.holds;
    let current_revision = pod.and_then(pod_revision);

    let mut conditions = Conditions::continuing(previous, o.generation, now);
    conditions.set(READY, ready);
    conditions.set(WORKLOAD_READY, workload_ready(o.workload_name, &o.workload));
    conditions.set_or_remove(PVC_READY, o.pvc.as_ref().map(pvc_ready));
    conditions.set_or_remove(CREDENTIALS, o.credentials.as_ref().map(credentials));
    // A server not asked this pass leaves the condition as the last pass said it.
    if let Some(live) = &o.live_config {
        conditions.set(CONFIG_APPLIED, config_applied(live));
    }
    let initial_data = o.initial_data.map(|object| initial_data(object, pod));
    conditions.set_or_remove(INITIAL_DATA, initial_data);
    let up_to_date = pod_up_to_date(
        current_revision.as_deref(),
        o.desired_revision,
        o.restart_allowed,
    );
    conditions.set(POD_UP_TO_DATE, up_to_date);

    ValkeyNodeStatus {
        ready: is_ready,
        role,
        pod_ip: pod.and_then(pod_ip),
        pod_name: pod.and_then(|p| p.metadata.name.clone()),
        node_name: pod.and_then(node_name),
        host_ip: pod.and_then(host_ip),
        zone: pod.and_then(zone),
        valkey_version: valkey_version(previous, o.valkey.as_ref()),
        current_revision,
        desired_revision: Some(o.desired_revision.to_owned()),
        conditions: Some(conditions.list),
        observed_generation: o.generation,
    }
}

/// What one condition says: whether it holds, its reason, and its message for a person.
#[derive(Debug, Clone, PartialEq)]
struct Verdict {
    holds: bool,
    reason: Word,
    message: String,
}

/// A condition's reason: a word of the schema's vocabulary, or one Kubernetes gave the pod or
/// its claim, passed on as it is (a container's waiting reason, the scheduler's, a claim's
/// phase), which no list of ours could hold whole.
#[derive(Debug, Clone, PartialEq)]
enum Word {
    Ours(StatusReason),
    Kubernetes(String),
}

impl Word {
    /// Kubernetes' word `given`, or `otherwise` when it gave none.
    fn passed_on(given: Option<String>, otherwise: StatusReason) -> Self {
        match given {
            Some(word) => StatusReason::from_name(&word).map_or(Word::Kubernetes(word), Word::Ours),
            None => Word::Ours(otherwise),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            Word::Ours(reason) => reason.as_str(),
            Word::Kubernetes(word) => word,
        }
    }
}

impl From<StatusReason> for Word {
    fn from(reason: StatusReason) -> Self {
        Word::Ours(reason)
    }
}

impl std::fmt::Display for Word {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Verdict {
    fn new(holds: bool, reason: impl Into<Word>, message: impl Into<String>) -> Self {
        Self {
            holds,
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn met(reason: impl Into<Word>, message: impl Into<String>) -> Self {
        Self::new(true, reason, message)
    }

    fn unmet(reason: impl Into<Word>, message: impl Into<String>) -> Self {
        Self::new(false, reason, message)
    }
}

/// The role Valkey reports, while a pod that is not terminating speaks for the node.
fn role(valkey: Option<&Answer>, pod: Option<&Pod>) -> Option<Role> {
    match valkey {
        Some(Answer::Pong { role, .. }) if pod.is_some() => *role,
        _ => None,
    }
}

/// Ready: the pod is ready and Valkey answers PING. The reason is the first thing in the way, from
/// the pod's own state to what Valkey answered.
fn ready(o: &Observed<'_>, pod: Option<&Pod>, role: Option<Role>) -> Verdict {
    let pod_ready = pod.is_some_and(pod_is_ready);
    let answered = pod.is_some() && matches!(o.valkey, Some(Answer::Pong { .. }));
    let (reason, message) = match pod {
        None => no_pod(o),
        Some(pod) => kept_from_serving(pod, pod_ready)
            .unwrap_or_else(|| valkey_reason(o.valkey.as_ref(), pod, pod_ready, role)),
    };
    Verdict::new(pod_ready && answered, reason, message)
}

/// Why no pod speaks for the node: the one there is terminating, or there is none yet.
fn no_pod(o: &Observed<'_>) -> (Word, String) {
    match o.pod {
        Some(p) => (
            StatusReason::PodTerminating.into(),
            format!(
                "Pod {} is terminating.",
                p.metadata.name.as_deref().unwrap_or_default()
            ),
        ),
        None => (
            StatusReason::PodMissing.into(),
            format!("{} has no pod yet.", o.workload_name),
        ),
    }
}

/// What Kubernetes says keeps the pod's server from serving, most fundamental first: the
/// scheduler, a failed restore, a waiting container, an OOM kill it has not been ready since.
fn kept_from_serving(pod: &Pod, pod_ready: bool) -> Option<(Word, String)> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    if let Some((reason, message)) = unschedulable(pod) {
        return Some((reason, format!("Pod {name} cannot be scheduled: {message}")));
    }
    if let RestoreState::Failed(message) = restore_state(pod) {
        return Some((
            INITIAL_DATA_FAILED.into(),
            format!("Pod {name} cannot start Valkey: its initial data failed: {message}"),
        ));
    }
    if let Some(waiting) = container_waiting(pod, name) {
        return Some(waiting);
    }
    if pod_ready {
        return None;
    }
    oom_killed(pod).map(|message| (OOM_KILLED.into(), message))
}

/// A container of the pod that waits: the kubelet's reason, the last exit, and its message.
fn container_waiting(pod: &Pod, name: &str) -> Option<(Word, String)> {
    let (container, waiting) = waiting_state(pod)?;
    let reason = Word::passed_on(waiting.reason.clone(), StatusReason::ContainerWaiting);
    let detail = waiting.message.clone().unwrap_or_default();
    let exit = last_exit(pod, container)
        .map(|(code, reason)| match reason {
            Some(reason) => format!(" (last exit code {code}, {reason})"),
            None => format!(" (last exit code {code})"),
        })
        .unwrap_or_default();
    Some((
        reason.clone(),
        format!("Container {container} of pod {name} is waiting: {reason}{exit}. {detail}")
            .trim()
            .to_owned(),
    ))
}

/// The Ready reason of a pod nothing else holds back: what Valkey answered, or why it was not
/// asked.
fn valkey_reason(
    valkey: Option<&Answer>,
    pod: &Pod,
    pod_ready: bool,
    role: Option<Role>,
) -> (Word, String) {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    match (valkey, pod_ready) {
        (Some(Answer::Pong { .. }), true) => (
            StatusReason::ValkeyReady.into(),
            format!(
                "Pod {name} is ready and Valkey answers PING{}.",
                role.map(|r| format!(" as {r}")).unwrap_or_default()
            ),
        ),
        // What Valkey answered is the most useful thing to say, ready pod or not: a server that
        // refuses the node-controller (protected mode, a wrong password) stays refused.
        (Some(Answer::Failed(why)), ready) => (
            refusal_reason(why).into(),
            format!(
                "Pod {name} is {}ready; Valkey answered the node-controller's PING with: {why}",
                if ready { "" } else { "not " }
            ),
        ),
        (_, false) => (
            StatusReason::PodNotReady.into(),
            format!("Pod {name} is not ready yet."),
        ),
        (None, true) => (
            StatusReason::ValkeyNotResponding.into(),
            format!("Pod {name} has no IP to ask Valkey on."),
        ),
    }
}

/// WorkloadReady: the StatefulSet or Deployment `name` has its pod ready.
fn workload_ready(name: &str, workload: &WorkloadState) -> Verdict {
    match workload {
        WorkloadState::Present { ready_replicas } if *ready_replicas >= 1 => Verdict::met(
            StatusReason::WorkloadReady,
            format!("{name} has its pod ready."),
        ),
        WorkloadState::Present { .. } => Verdict::unmet(
            StatusReason::WorkloadNotReady,
            format!("{name} has no ready pod yet."),
        ),
        WorkloadState::Missing => Verdict::unmet(
            StatusReason::WorkloadMissing,
            format!("{name} does not exist yet."),
        ),
        WorkloadState::Rejected(why) => {
            Verdict::unmet(StatusReason::WorkloadRejected, why.as_str())
        }
    }
}

/// PersistentVolumeClaimReady: the data volume is bound, and how far a resize of it is.
fn pvc_ready(pvc: &PvcState) -> Verdict {
    match pvc {
        PvcState::Bound { name, resize: None } => {
            Verdict::met(StatusReason::Bound, format!("{name} is bound."))
        }
        PvcState::Bound {
            name,
            resize: Some(resize),
        } => resize_condition(name, resize),
        PvcState::ExpansionNotSupported {
            name,
            class,
            wanted,
            holds,
            answer,
        } => Verdict::unmet(
            EXPANSION_NOT_SUPPORTED,
            expansion_not_supported(name, class.as_deref(), wanted, holds, answer),
        ),
        PvcState::Phase { name, phase } => Verdict::unmet(
            Word::passed_on(Some(phase.clone()), StatusReason::Pending),
            format!("{name} is {phase}; the pod starts once its volume is bound."),
        ),
        PvcState::Missing => {
            Verdict::unmet(StatusReason::Missing, "The data volume does not exist yet.")
        }
        PvcState::Rejected(why) => Verdict::unmet(StatusReason::Rejected, why.as_str()),
    }
}

/// Credentials: the Secret the node names exists and holds the password.
fn credentials(state: &CredentialsState) -> Verdict {
    match state {
        CredentialsState::Found => Verdict::met(
            StatusReason::SecretFound,
            "The credentials Secret exists and holds the password.",
        ),
        CredentialsState::SecretMissing { secret } => Verdict::unmet(
            StatusReason::SecretNotFound,
            format!(
                "Secret {secret} does not exist in this namespace; the pod cannot start until it \
                 does."
            ),
        ),
        CredentialsState::KeyMissing { secret, key } => Verdict::unmet(
            StatusReason::SecretKeyNotFound,
            format!("Secret {secret} has no key {key}; the pod cannot start until it does."),
        ),
    }
}

/// ConfigApplied: the running server has the live settings of spec.config.
fn config_applied(live: &LiveSettingsOutcome) -> Verdict {
    match live {
        LiveSettingsOutcome::Applied { settings } => Verdict::met(
            StatusReason::Applied,
            format!("The running server has the {settings} live setting(s) of spec.config."),
        ),
        LiveSettingsOutcome::NotSet { answer } => Verdict::unmet(
            StatusReason::ConfigNotSet,
            format!(
                "The live settings of spec.config could not be set on the running server: \
                 {answer}. They are tried again; the user of spec.credentials needs CONFIG SET."
            ),
        ),
        LiveSettingsOutcome::AwaitingRestart { running, desired } => Verdict::unmet(
            StatusReason::AwaitingRestart,
            format!(
                "The pod runs revision {running}; the live settings of spec.config are those of \
                 revision {desired}, and its server starts with them."
            ),
        ),
        LiveSettingsOutcome::Refused { keys, answer } => Verdict::unmet(
            StatusReason::ConfigRefused,
            format!(
                "Valkey refused CONFIG SET of {}: {answer}. Nothing else of the node was changed; \
                 correct the value in spec.config.",
                keys.join(", ")
            ),
        ),
    }
}

/// InitialData: the snapshot `object` of spec.initialData is in the data folder, as the pod's
/// restore init container tells it.
fn initial_data(object: &str, pod: Option<&Pod>) -> Verdict {
    match pod.map(restore_state) {
        Some(RestoreState::Done) => Verdict::met(
            StatusReason::Restored,
            format!("The snapshot {object} is in the data folder."),
        ),
        Some(RestoreState::Failed(message)) => Verdict::unmet(INITIAL_DATA_FAILED, message),
        Some(RestoreState::Running) => Verdict::unmet(
            StatusReason::Fetching,
            format!("Fetching the snapshot {object}; Valkey starts once it is checked."),
        ),
        Some(RestoreState::NotStarted) | None => Verdict::unmet(
            StatusReason::Pending,
            format!("The snapshot {object} is fetched when the pod starts."),
        ),
    }
}

/// PodUpToDate: the pod runs the desired revision; else whether it is being replaced or waits
/// for the parent's approval.
fn pod_up_to_date(current: Option<&str>, desired: &str, restart_allowed: bool) -> Verdict {
    match current {
        Some(rev) if rev == desired => {
            Verdict::met(StatusReason::UpToDate, "The pod runs the desired revision.")
        }
        Some(rev) if !restart_allowed => Verdict::unmet(
            StatusReason::AwaitingRestartApproval,
            format!(
                "The pod runs revision {rev}; {desired} waits until spec.allowedRevision allows it."
            ),
        ),
        Some(rev) => Verdict::unmet(
            StatusReason::Restarting,
            format!("The pod runs revision {rev} and is being replaced by {desired}."),
        ),
        None => Verdict::unmet(StatusReason::NoPod, "No pod runs yet."),
    }
}

fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status.as_ref()?.pod_ip.clone()
}

fn host_ip(pod: &Pod) -> Option<String> {
    pod.status.as_ref()?.host_ip.clone()
}

fn node_name(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.node_name.clone()
}

/// The zone of the pod's node: the API server copies it onto the pod at binding, so no Node is
/// read.
fn zone(pod: &Pod) -> Option<String> {
    pod.labels().get(ZONE_LABEL).cloned()
}

/// The server's version, kept while the server does not answer: the build needs it to tell live
/// settings apart.
fn valkey_version(previous: Option<&ValkeyNodeStatus>, valkey: Option<&Answer>) -> Option<String> {
    match valkey {
        Some(Answer::Pong { server, .. }) if server.version.is_some() => server.version.clone(),
        _ => previous.and_then(|s| s.valkey_version.clone()),
    }
}

/// The reasons of PersistentVolumeClaimReady that need a person: the volume cannot reach its size.
pub const EXPANSION_NOT_SUPPORTED: StatusReason = StatusReason::VolumeExpansionNotSupported;
pub const RESIZE_FAILED: StatusReason = StatusReason::VolumeResizeFailed;

/// PersistentVolumeClaimReady while a claim grows: True (the volume serves all along) unless the
/// storage gave up.
fn resize_condition(name: &str, r: &Resize) -> Verdict {
    let (from, to) = (&r.from, &r.to);
    match &r.step {
        ResizeStep::Pending => Verdict::met(
            StatusReason::VolumeResizePending,
            format!(
                "{name} asks for {to} and its volume holds {from}; waiting for the storage's \
                 resizer to grow it. The pod keeps running on it."
            ),
        ),
        ResizeStep::Controller => Verdict::met(
            StatusReason::VolumeResizing,
            format!("{name} is growing from {from} to {to}; the pod keeps running on it."),
        ),
        ResizeStep::FileSystem => Verdict::met(
            StatusReason::FileSystemResizePending,
            format!(
                "The volume of {name} has grown to {to}; the kubelet grows its file system next \
                 (storage that cannot do that online waits for the pod's next restart, which the \
                 operator does not force). Until then the pod sees {from}."
            ),
        ),
        ResizeStep::Failed(why) => Verdict::unmet(
            RESIZE_FAILED,
            format!(
                "{name} could not grow from {from} to {to}: {why}. It keeps serving at {from}; \
                 the storage's resizer retries."
            ),
        ),
    }
}

fn expansion_not_supported(
    name: &str,
    class: Option<&str>,
    wanted: &str,
    holds: &str,
    answer: &str,
) -> String {
    let why = match class {
        Some(class) => format!(
            "its StorageClass {class} does not allow volume expansion. If that storage can grow, \
             set allowVolumeExpansion: true on StorageClass {class} and the volume grows in place"
        ),
        None => "it has no StorageClass, and only a claim of a class that allows volume \
                 expansion can grow"
            .to_owned(),
    };
    format!(
        "{name} cannot grow to {wanted}: {why}. It stays at {holds}; nothing else of the node \
         changes and no pod restarts. (The API server: {answer})"
    )
}

/// The conditions being built, with what every entry shares.
struct Conditions<'a> {
    list: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    generation: Option<i64>,
    now: &'a Time,
}

impl<'a> Conditions<'a> {
    /// The previous status's conditions, to be brought up to date.
    fn continuing(
        previous: Option<&ValkeyNodeStatus>,
        generation: Option<i64>,
        now: &'a Time,
    ) -> Self {
        Self {
            list: previous
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default(),
            generation,
            now,
        }
    }

    fn set(&mut self, type_: &str, verdict: Verdict) {
        set_condition(
            &mut self.list,
            type_,
            ConditionStatus::from(verdict.holds),
            verdict.reason.as_str(),
            &verdict.message,
            self.generation,
            self.now,
        );
    }

    /// Sets the condition, or removes it from a node it does not speak of (`None`: no
    /// persistence, no credentials, no initial data).
    fn set_or_remove(&mut self, type_: &str, verdict: Option<Verdict>) {
        match verdict {
            Some(verdict) => self.set(type_, verdict),
            None => {
                plumbing::conditions::remove_condition(&mut self.list, type_);
            }
        }
    }
}

/// A reason a person can act on, from the words of Valkey's refusal.
pub fn refusal_reason(answer: &str) -> StatusReason {
    let has = |word: &str| answer.contains(word);
    if has("DENIED") || has("protected mode") {
        StatusReason::ValkeyProtectedMode
    } else if has("WRONGPASS") || has("NOAUTH") || has("NOPERM") || has("invalid username") {
        StatusReason::ValkeyAuthenticationFailed
    } else if has("LOADING") {
        StatusReason::ValkeyLoading
    } else if has("MASTERDOWN") || has("PRIMARYDOWN") {
        StatusReason::ValkeyPrimaryDown
    } else {
        StatusReason::ValkeyNotResponding
    }
}

pub fn pod_is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn pod_revision(pod: &Pod) -> Option<String> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(REVISION_ANNOTATION)
        .cloned()
}

fn unschedulable(pod: &Pod) -> Option<(Word, String)> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    Some((
        Word::passed_on(c.reason.clone(), StatusReason::Unschedulable),
        c.message.clone().unwrap_or_default(),
    ))
}

/// The first container of the pod that waits: Valkey's, else the exporter's (a wrong exporter
/// image keeps the pod from being ready as surely as a wrong Valkey image, and says so the same
/// way, so a parent sees that the pod cannot run).
fn waiting_state(pod: &Pod) -> Option<(&str, &ContainerStateWaiting)> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    [VALKEY_CONTAINER, EXPORTER_CONTAINER]
        .iter()
        .find_map(|name| {
            let status = statuses.iter().find(|s| s.name == *name)?;
            Some((
                status.name.as_str(),
                status.state.as_ref()?.waiting.as_ref()?,
            ))
        })
}

/// Where the restore init container of a pod is.
#[derive(Debug, Clone, PartialEq)]
enum RestoreState {
    /// No such init container, or not started yet.
    NotStarted,
    Running,
    Done,
    /// It exited non-zero (now or the last time, while the kubelet waits to run it again).
    Failed(String),
}

fn restore_state(pod: &Pod) -> RestoreState {
    use crate::render::restore::RESTORE_CONTAINER;
    let Some(status) = pod
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|l| l.iter().find(|s| s.name == RESTORE_CONTAINER))
    else {
        return RestoreState::NotStarted;
    };
    let failed = |t: &k8s_openapi::api::core::v1::ContainerStateTerminated| {
        let message = t
            .message
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(|m| m.lines().last().unwrap_or(m).to_owned())
            .unwrap_or_else(|| {
                format!(
                    "the {RESTORE_CONTAINER} init container exited with code {} ({})",
                    t.exit_code,
                    t.reason.as_deref().unwrap_or("Error")
                )
            });
        RestoreState::Failed(message)
    };
    let state = status.state.as_ref();
    if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        return if t.exit_code == 0 {
            RestoreState::Done
        } else {
            failed(t)
        };
    }
    if let Some(t) = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .filter(|t| t.exit_code != 0)
    {
        // Running again or waiting to: the last run's error still says why there is no data yet.
        return failed(t);
    }
    if state.and_then(|s| s.running.as_ref()).is_some() {
        RestoreState::Running
    } else {
        RestoreState::NotStarted
    }
}

/// The exit code of the container's last run, and the runtime's reason for its end (OOMKilled,
/// Error, Completed) when it gave one.
fn last_exit(pod: &Pod, container: &str) -> Option<(i32, Option<String>)> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let last = statuses
        .iter()
        .find(|s| s.name == container)?
        .last_state
        .as_ref()?;
    let terminated = last.terminated.as_ref()?;
    Some((terminated.exit_code, terminated.reason.clone()))
}

/// The Ready reason of a pod whose server the kernel killed for exceeding its memory limit.
pub const OOM_KILLED: StatusReason = StatusReason::OOMKilled;

/// Why a pod that is not ready is not: its server was OOM-killed, and is dead or has not been
/// ready since the kubelet restarted it. The pod's Ready condition turned False when the kubelet
/// saw the server die, before it started it again; a Ready condition that changed after the
/// restart is another story (a probe failing later), which the kill of the run before does not
/// explain. A server that is killed again and again waits in CrashLoopBackOff, whose reason wins.
fn oom_killed(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let valkey = status
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == VALKEY_CONTAINER)?;
    let state = valkey.state.as_ref()?;
    let terminated = match (&state.terminated, &state.running) {
        (Some(now), _) => now,
        (None, Some(running)) => {
            let last = valkey.last_state.as_ref()?.terminated.as_ref()?;
            let started = running.started_at.as_ref()?;
            let not_ready_since = status
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready")?
                .last_transition_time
                .as_ref()?;
            // Whole seconds: the kubelet may start the server within the second it saw it die.
            if not_ready_since.0.as_second() > started.0.as_second().saturating_add(1) {
                return None;
            }
            last
        }
        (None, None) => return None,
    };
    if terminated.reason.as_deref() != Some(OOM_KILLED.as_str()) {
        return None;
    }
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let limit = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == VALKEY_CONTAINER))
        .and_then(|c| {
            c.resources
                .as_ref()?
                .limits
                .as_ref()?
                .get("memory")
                .cloned()
        })
        .map(|q| format!(" of {}", q.0))
        .unwrap_or_default();
    let at = terminated
        .finished_at
        .as_ref()
        .map(|t| format!(" at {}", t.0))
        .unwrap_or_default();
    Some(format!(
        "Container {VALKEY_CONTAINER} of pod {name} was OOM-killed{at}: it used more than its \
         memory limit{limit}, and the kubelet restarted it ({} restarts); it is not ready yet. \
         A maxmemory at or above the limit leaves the server no room: unset it (the \
         node-controller then sets 60% of the limit) or lower it.",
        valkey.restart_count
    ))
}

#[cfg(test)]
mod tests;
