package lb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
)

// Component is the name the allocator writes its Events under.
const Component = "localkube-loadbalancer"

// Run serves LoadBalancer Services until ctx ends: every change of any Service leads to one pass of
// Decide over all of them (a few hundred at most here), whose status changes are patched and whose
// Events are recorded once each (a Service still pending is not told the same thing again).
func Run(ctx context.Context, client kubernetes.Interface, cfg Config, logger *log.Logger) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	services := factory.Core().V1().Services()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	const all = "all"
	enqueue := func(any) { queue.Add(all) }
	if _, err := services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), services.Informer().HasSynced) {
		return fmt.Errorf("services informer did not sync: %w", ctx.Err())
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return err
	}
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, Component)
	logger.Printf("serving LoadBalancer Services of no class and of class %s from %s; %d more classes", cfg.Class, cfg.Default, len(cfg.Classes))
	for class, p := range cfg.Classes {
		logger.Printf("class %s: %s", class, p)
	}

	told := map[types.UID]string{} // the last Event note of each Service
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	queue.Add(all)
	for {
		key, quit := queue.Get()
		if quit {
			return nil
		}
		err := pass(ctx, client, cfg, services.Lister().List, recorder, told, logger)
		if err != nil && ctx.Err() == nil {
			logger.Printf("pass failed, retrying: %v", err)
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
}

type lister func(labels.Selector) ([]*corev1.Service, error)

func pass(ctx context.Context, client kubernetes.Interface, cfg Config, list lister, recorder events.EventRecorder, told map[types.UID]string, logger *log.Logger) error {
	svcs, err := list(labels.Everything())
	if err != nil {
		return err
	}
	byUID := map[types.UID]*corev1.Service{}
	for _, s := range svcs {
		byUID[s.UID] = s
	}
	changes, evs := Decide(cfg, svcs)
	var errs []error
	failed := map[types.UID]bool{}
	for _, c := range changes {
		if err := patchIngress(ctx, client, c); err != nil {
			errs = append(errs, err)
			failed[c.UID] = true
			continue
		}
		logger.Printf("%s/%s: ingress %s", c.Namespace, c.Name, describe(c.Ingress))
	}
	for _, e := range evs {
		// An address not written yet is told once it is (the pass is retried).
		if told[e.UID] == e.Note || failed[e.UID] {
			continue
		}
		svc := byUID[e.UID]
		if svc == nil {
			continue
		}
		kind := corev1.EventTypeNormal
		if e.Warning {
			kind = corev1.EventTypeWarning
			logger.Printf("%s/%s pending: %s", e.Namespace, e.Name, e.Note)
		}
		recorder.Eventf(svc, nil, kind, e.Reason, "Allocate", "%s", e.Note)
		told[e.UID] = e.Note
	}
	for uid := range told {
		if byUID[uid] == nil {
			delete(told, uid)
		}
	}
	return errors.Join(errs...)
}

// patchIngress writes the Service's ingress with a merge patch of its status, naming its UID so
// that a Service deleted and made again under the same name is not given its predecessor's.
func patchIngress(ctx context.Context, client kubernetes.Interface, c Change) error {
	ingress := c.Ingress
	if ingress == nil {
		ingress = []corev1.LoadBalancerIngress{}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": c.UID},
		"status":   map[string]any{"loadBalancer": map[string]any{"ingress": ingress}},
	})
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = client.CoreV1().Services(c.Namespace).Patch(pctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: Component}, "status")
	if apierrors.IsNotFound(err) {
		return nil // gone: its address is free at the next pass
	}
	if err != nil {
		return fmt.Errorf("service %s/%s: %w", c.Namespace, c.Name, err)
	}
	return nil
}

func describe(ingress []corev1.LoadBalancerIngress) string {
	if len(ingress) == 0 {
		return "cleared"
	}
	var out string
	for i, in := range ingress {
		if i > 0 {
			out += ", "
		}
		out += in.IP
	}
	return out
}
