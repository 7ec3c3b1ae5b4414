//! The data volume's size: the spec's `persistence.size` only ever grows the claim. A claim that
//! already asks for more (grown by hand, or kept from an earlier node of the same name with a
//! larger size) keeps its request, since Kubernetes refuses a request below what a volume holds.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::memory::quantity_bytes;

const STORAGE: &str = "storage";

/// The claim's requested storage.
pub fn request(pvc: &PersistentVolumeClaim) -> Option<&Quantity> {
    pvc.spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get(STORAGE)
}

/// The storage the claim's volume holds now (`status.capacity`).
pub fn capacity(pvc: &PersistentVolumeClaim) -> Option<&Quantity> {
    pvc.status.as_ref()?.capacity.as_ref()?.get(STORAGE)
}

/// Whether `a` is more storage than `b` (false when either does not parse).
pub fn larger(a: Option<&Quantity>, b: Option<&Quantity>) -> bool {
    match (
        a.and_then(|a| quantity_bytes(&a.0)),
        b.and_then(|b| quantity_bytes(&b.0)),
    ) {
        (Some(a), Some(b)) => a > b,
        _ => false,
    }
}

/// Whether applying `desired` would grow the live claim's request.
pub fn grows(desired: &PersistentVolumeClaim, live: Option<&PersistentVolumeClaim>) -> bool {
    live.is_some_and(|live| larger(request(desired), request(live)))
}

/// Keeps the live claim's request in `desired` when it is larger.
pub fn keep_larger_request(
    desired: &mut PersistentVolumeClaim,
    live: Option<&PersistentVolumeClaim>,
) {
    let Some(live_request) = live.and_then(request) else {
        return;
    };
    if !larger(Some(live_request), request(desired)) {
        return;
    }
    if let Some(requests) = desired
        .spec
        .as_mut()
        .and_then(|s| s.resources.as_mut())
        .and_then(|r| r.requests.as_mut())
    {
        requests.insert(STORAGE.to_owned(), live_request.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(request: &str) -> PersistentVolumeClaim {
        serde_yaml::from_str(&format!(
            "metadata: {{name: data}}\nspec: {{resources: {{requests: {{storage: {request}}}}}}}"
        ))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_request_only_grows() {
        let live = claim("2Gi");
        let mut desired = claim("1Gi");
        keep_larger_request(&mut desired, Some(&live));
        assert_eq!(request(&desired), Some(&Quantity("2Gi".into())), "kept");
        assert!(!grows(&desired, Some(&live)));

        let mut desired = claim("3Gi");
        keep_larger_request(&mut desired, Some(&live));
        assert_eq!(request(&desired), Some(&Quantity("3Gi".into())), "grown");
        assert!(grows(&desired, Some(&live)));

        let mut desired = claim("2048Mi");
        keep_larger_request(&mut desired, Some(&live));
        assert_eq!(
            request(&desired),
            Some(&Quantity("2048Mi".into())),
            "the same size as written in the spec"
        );
        assert!(!grows(&desired, Some(&live)));
        assert!(!grows(&desired, None), "a new claim does not grow");
    }
}
