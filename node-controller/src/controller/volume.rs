//! The data volume's stage: the claim applied (its request only ever grows, see
//! [`crate::render::volume`]), and what the API's answer and the claim's status say about it.
//! Growing a claim is the storage's work once the API accepts the larger request; the pod is not
//! touched, so the revision (which leaves the size out) stays and nothing restarts.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::reflector::ObjectRef;
use plumbing::ObjectKey;
use valkey_api::v1alpha1::ValkeyNode;

use super::apply;
use super::context::Context;
use super::error::Error;
use super::observe;
use crate::render::volume;
use crate::status::PvcState;

/// Applies `desired` and reports the claim.
pub async fn sync(
    ctx: &Context,
    node: &ValkeyNode,
    key: &ObjectKey,
    desired: &PersistentVolumeClaim,
) -> Result<PvcState, Error> {
    let namespace = key.namespace();
    let name = desired.metadata.name.clone().unwrap_or_default();
    let store = &ctx.stores.pvcs;
    let live = store.get(&ObjectRef::new(&name).within(namespace));
    let mut desired = desired.clone();
    volume::keep_larger_request(&mut desired, live.as_deref());
    match apply::child(ctx, node, key, &desired, store).await {
        Ok(()) => Ok(observe::pvc_state(store, namespace, &name)),
        Err(Error::Apply {
            source: kube::Error::Api(status),
            ..
        }) => refused(
            &name,
            &desired,
            live.as_deref(),
            status.code,
            &status.message,
        )
        .ok_or_else(|| Error::Apply {
            kind: "PersistentVolumeClaim",
            name: name.clone(),
            source: kube::Error::Api(status),
        }),
        Err(e) => Err(e),
    }
}

/// What an API refusal of the claim means for the node, or `None` for an error to retry.
/// Invalid (422): an immutable field such as the class changed. Forbidden (403) while growing
/// a bound claim: the resize admission refused it, since the claim's class does not allow
/// expansion (a claim not bound yet is reported as such, and grows once it is).
pub fn refused(
    name: &str,
    desired: &PersistentVolumeClaim,
    live: Option<&PersistentVolumeClaim>,
    code: u16,
    message: &str,
) -> Option<PvcState> {
    match code {
        422 => Some(PvcState::Rejected(format!(
            "The API refused the change to {name}: {message}"
        ))),
        403 if volume::grows(desired, live) => {
            let live = live?;
            match observe::pvc_state_of(name, Some(live)) {
                PvcState::Bound { .. } => Some(PvcState::ExpansionNotSupported {
                    name: name.to_owned(),
                    class: live
                        .spec
                        .as_ref()
                        .and_then(|s| s.storage_class_name.clone())
                        .filter(|c| !c.is_empty()),
                    wanted: quantity(volume::request(desired)),
                    holds: quantity(volume::capacity(live).or(volume::request(live))),
                    answer: message.to_owned(),
                }),
                not_bound => Some(not_bound),
            }
        }
        _ => None,
    }
}

fn quantity(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> String {
    q.map(|q| q.0.clone()).unwrap_or_else(|| "?".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(yaml: &str) -> PersistentVolumeClaim {
        serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    const FORBIDDEN: &str = "persistentvolumeclaims \"valkey-n-data\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize";

    #[test]
    fn a_refused_growth_names_the_class_and_keeps_the_volume() {
        let live = claim(
            "metadata: {name: valkey-n-data}\nspec: {storageClassName: slow, resources: {requests: {storage: 1Gi}}}\nstatus: {phase: Bound, capacity: {storage: 1Gi}}",
        );
        let desired =
            claim("metadata: {name: valkey-n-data}\nspec: {resources: {requests: {storage: 2Gi}}}");
        let state = refused("valkey-n-data", &desired, Some(&live), 403, FORBIDDEN);
        assert_eq!(
            state,
            Some(PvcState::ExpansionNotSupported {
                name: "valkey-n-data".into(),
                class: Some("slow".into()),
                wanted: "2Gi".into(),
                holds: "1Gi".into(),
                answer: FORBIDDEN.into(),
            })
        );

        // Not bound yet: said as such; the next pass grows it once it is.
        let pending = claim(
            "metadata: {name: valkey-n-data}\nspec: {storageClassName: slow, resources: {requests: {storage: 1Gi}}}\nstatus: {phase: Pending}",
        );
        assert!(matches!(
            refused(
                "valkey-n-data",
                &desired,
                Some(&pending),
                403,
                "Only bound persistent volume claims can be expanded"
            ),
            Some(PvcState::Phase { .. })
        ));

        // A 403 that is not about growing (RBAC) is an error to retry.
        assert_eq!(
            refused("valkey-n-data", &live, Some(&live), 403, "forbidden"),
            None
        );
        assert_eq!(
            refused("valkey-n-data", &desired, Some(&live), 500, "boom"),
            None
        );
        assert!(matches!(
            refused("valkey-n-data", &desired, Some(&live), 422, "immutable"),
            Some(PvcState::Rejected(_))
        ));
    }
}
