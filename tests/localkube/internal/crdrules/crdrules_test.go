// Package crdrules checks the CEL rules of the operator's CRDs (charts/valkey-operator/crds,
// generated from valkey-api/schema) with the API server's own code, without an API server: the
// CRD validation the API server runs when a CRD is applied (rules compile, their estimated cost
// fits), then its defaulting and CEL validator on objects, on create (no old object) and on
// update. It lives in this module because this module already builds the API server.
package crdrules

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// crdDir is the chart's CRD folder, from this package's folder (tests/localkube/internal/crdrules).
var crdDir = filepath.Join("..", "..", "..", "..", "charts", "valkey-operator", "crds")

type kind struct {
	schema    *structuralschema.Structural
	validator *cel.Validator
}

func load(t *testing.T, file string) kind {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(crdDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&crd)
	var internal apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&crd, &internal, nil); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	// What the API server says when the CRD is applied: every rule compiles and fits the cost
	// budget, with the messages, reasons and field paths it accepts.
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), &internal); len(errs) > 0 {
		t.Fatalf("the API server would refuse %s: %v", file, errs.ToAggregate())
	}
	// With one version (or the same schema in every version) the internal form keeps the schema
	// at the top, as the API server's handler reads it.
	validation := internal.Spec.Validation
	if validation == nil && len(internal.Spec.Versions) == 1 {
		validation = internal.Spec.Versions[0].Schema
	}
	if validation == nil || validation.OpenAPIV3Schema == nil {
		t.Fatalf("%s: no schema", file)
	}
	s, err := structuralschema.NewStructural(validation.OpenAPIV3Schema)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return kind{schema: s, validator: cel.NewValidator(s, true, celconfig.PerCallLimit)}
}

func object(t *testing.T, text string) map[string]interface{} {
	t.Helper()
	if text == "" {
		return nil
	}
	var obj map[string]interface{}
	// The API machinery's JSON decoding: whole numbers as int64, as the API server sees them.
	if err := utiljson.Unmarshal([]byte(text), &obj); err != nil {
		t.Fatalf("%v: %s", err, text)
	}
	return obj
}

// validate runs the API server's defaulting and CEL rules on newText (and oldText, for an update)
// and returns the messages of the rules that fail.
func (k kind) validate(t *testing.T, newText, oldText string) []string {
	t.Helper()
	obj, old := object(t, newText), object(t, oldText)
	defaulting.Default(obj, k.schema)
	var oldObj interface{}
	if old != nil {
		defaulting.Default(old, k.schema)
		oldObj = old
	}
	errs, _ := k.validator.Validate(context.Background(), field.NewPath(""), k.schema, obj, oldObj, celconfig.RuntimeCELCostBudget)
	var messages []string
	for _, e := range errs {
		messages = append(messages, e.Error())
	}
	return messages
}

type rule struct {
	name     string
	new, old string
	// A substring of the one message expected; empty when the object must pass.
	want string
}

func check(t *testing.T, k kind, cases []rule) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := k.validate(t, c.new, c.old)
			switch {
			case c.want == "" && len(got) > 0:
				t.Fatalf("refused: %q", got)
			case c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want)):
				t.Fatalf("want one error with %q, got %q", c.want, got)
			}
		})
	}
}

func parent(kindName, spec string) string {
	return `{"apiVersion":"valkey.io/v1alpha1","kind":"` + kindName + `","metadata":{"name":"orders","namespace":"prod"},"spec":` + spec + `}`
}

func TestRestoreFromIsSetOnlyAtCreation(t *testing.T) {
	const (
		empty     = `{}`
		fromA     = `{"restoreFrom":{"backup":"orders-a"}}`
		fromB     = `{"restoreFrom":{"backup":"orders-b"}}`
		fromA3    = `{"shards":4,"restoreFrom":{"backup":"orders-a"}}`
		fromStore = `{"restoreFrom":{"store":{"s3":{"bucket":"backups","credentials":{"secretName":"s3"}}},"path":"prod/orders/orders-a-1a2b3c4d"}}`
		both      = `{"restoreFrom":{"backup":"orders-a","store":{"s3":{"bucket":"backups","credentials":{"secretName":"s3"}}},"path":"p"}}`
		neither   = `{"restoreFrom":{}}`
		noPath    = `{"restoreFrom":{"store":{"s3":{"bucket":"backups","credentials":{"secretName":"s3"}}}}}`
		dotDot    = `{"restoreFrom":{"store":{"s3":{"bucket":"backups","credentials":{"secretName":"s3"}}},"path":"prod/../orders"}}`
		null      = `{"restoreFrom":null}`
	)
	for _, k := range []struct{ file, kind string }{
		{"valkey.io_valkeyclusters.yaml", "ValkeyCluster"},
		{"valkey.io_valkeyreplications.yaml", "ValkeyReplication"},
	} {
		t.Run(k.kind, func(t *testing.T) {
			check(t, load(t, k.file), []rule{
				{name: "created with a backup", new: parent(k.kind, fromA)},
				{name: "created with a store location", new: parent(k.kind, fromStore)},
				{name: "created empty", new: parent(k.kind, empty)},
				{name: "kept on an update of another field", new: parent(k.kind, fromA3), old: parent(k.kind, fromA)},
				{name: "added to an existing object", new: parent(k.kind, fromA), old: parent(k.kind, empty), want: "spec.restoreFrom can only be set when the object is created"},
				{name: "removed from an existing object", new: parent(k.kind, empty), old: parent(k.kind, fromA), want: "spec.restoreFrom can only be set when the object is created"},
				{name: "changed", new: parent(k.kind, fromB), old: parent(k.kind, fromA), want: "spec.restoreFrom cannot change after creation"},
				{name: "backup and store", new: parent(k.kind, both), want: "restoreFrom needs exactly one of backup"},
				{name: "neither backup nor store", new: parent(k.kind, neither), want: "restoreFrom needs exactly one of backup"},
				{name: "store without path", new: parent(k.kind, noPath), want: "restoreFrom.store and restoreFrom.path go together"},
				{name: "path with ..", new: parent(k.kind, dotDot), want: "restoreFrom.path must not have . or .."},
				// A client that sends null means absent: nothing to refuse, and no way around the rules.
				{name: "null on an object without it", new: parent(k.kind, null), old: parent(k.kind, empty)},
				{name: "null over a backup", new: parent(k.kind, null), old: parent(k.kind, fromA), want: "spec.restoreFrom can only be set when the object is created"},
			})
		})
	}
}

func backup(name, spec, status string) string {
	text := `{"apiVersion":"valkey.io/v1alpha1","kind":"ValkeyBackup","metadata":{"name":"` + name + `","namespace":"prod"},"spec":` + spec
	if status != "" {
		text += `,"status":` + status
	}
	return text + `}`
}

func TestValkeyBackupRules(t *testing.T) {
	const (
		spec       = `{"source":{"kind":"ValkeyCluster","name":"orders"},"store":{"s3":{"endpoint":"https://s3.example:9000","bucket":"backups","prefix":"valkey/prod","credentials":{"secretName":"s3"}}}}`
		paused     = `{"source":{"kind":"ValkeyCluster","name":"orders"},"store":{"s3":{"endpoint":"https://s3.example:9000","bucket":"backups","prefix":"valkey/prod","credentials":{"secretName":"s3"}}},"consistency":"PausedWrites"}`
		dotPrefix  = `{"source":{"kind":"ValkeyCluster","name":"orders"},"store":{"s3":{"bucket":"backups","prefix":"valkey/./prod","credentials":{"secretName":"s3"}}}}`
		running    = `{"phase":"Running"}`
		longName64 = "a234567890123456789012345678901234567890123456789012345678901234"
	)
	check(t, load(t, "valkey.io_valkeybackups.yaml"), []rule{
		{name: "created", new: backup("orders-1", spec, "")},
		{name: "status written", new: backup("orders-1", spec, running), old: backup("orders-1", spec, "")},
		{name: "spec changed", new: backup("orders-1", paused, ""), old: backup("orders-1", spec, ""), want: "spec of a ValkeyBackup cannot change once created"},
		{name: "prefix with .", new: backup("orders-1", dotPrefix, ""), want: "store.s3.prefix must not have . or .."},
		{name: "name of 64 characters", new: backup(longName64, spec, ""), want: "metadata.name of a ValkeyBackup must be at most 63 characters"},
	})
}

func TestValkeyBackupScheduleRules(t *testing.T) {
	schedule := func(name string) string {
		return `{"apiVersion":"valkey.io/v1alpha1","kind":"ValkeyBackupSchedule","metadata":{"name":"` + name + `","namespace":"prod"},"spec":{"schedule":"0 2 * * *","template":{"source":{"kind":"ValkeyReplication","name":"orders"},"store":{"s3":{"bucket":"backups","credentials":{"secretName":"s3"}}}}}}`
	}
	k := load(t, "valkey.io_valkeybackupschedules.yaml")
	check(t, k, []rule{
		{name: "created", new: schedule("nightly")},
		{name: "name of 48 characters", new: schedule(strings.Repeat("a", 48))},
		{name: "name of 49 characters", new: schedule(strings.Repeat("a", 49)), want: "metadata.name of a ValkeyBackupSchedule must be at most 48 characters"},
	})
	// The template is a ValkeyBackup's spec, but a schedule's template may change: the rule that
	// fixes a backup's spec belongs to the ValkeyBackup, not to the type.
	changed := strings.Replace(schedule("nightly"), `"name":"orders"`, `"name":"payments"`, 1)
	check(t, k, []rule{{name: "template changed", new: changed, old: schedule("nightly")}})
}
