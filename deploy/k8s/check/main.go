// Command check proves sidecar's Kubernetes manifests right with the Kubernetes API machinery
// itself, not with a look-alike:
//
//   - every kustomization under the given roots is built with kustomize's own library (krusty);
//   - every object it yields is decoded strictly into the k8s.io/api types (an unknown or
//     duplicate field is an error), defaulted, converted to the internal types and run through
//     the create path of kube-apiserver's registry strategies (k8s.io/kubernetes/pkg/registry),
//     which is where the apiserver's validation (k8s.io/kubernetes/pkg/apis/.../validation)
//     and its warnings come from;
//   - every pod template is evaluated by the Pod Security admission library at each level, and
//     against the labels of its namespace when the build contains that namespace;
//   - every object is checked against the Kubernetes JSON schemas with kubeconform, from a
//     pinned wheel of schemas (-schemas), nothing downloaded at run time;
//   - sidecar's own rules (rules.go): native sidecar, security context, storage, probes, token,
//     Service and NetworkPolicy wiring, Pod Security verdicts;
//   - label values in the YAML sources are quoted (lint.go);
//   - with -ephemeral, the partial container of the `kubectl debug --profile=general --custom`
//     recipe is applied as kubectl does and validated as an ephemeral-container update.
//
// Usage: check [-json] [-schemas WHEEL|DIR] [-ephemeral FILE] ROOT...
//
//	check -print KUSTOMIZATION_DIR...   (what kustomize builds, as `kubectl kustomize` prints it)
//
// It prints a report (JSON with -json) and exits 1 when anything is wrong, 2 on bad usage.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Report is everything the checker found; tests read it with -json.
type Report struct {
	KubernetesVersion string    `json:"kubernetes_version"`
	Builds            []*Build  `json:"builds"`
	Ephemeral         *Object   `json:"ephemeral,omitempty"`
	Lint              []Finding `json:"lint"`
	Problems          []string  `json:"problems"`
	OK                bool      `json:"ok"`
}

// Build is one kustomization and what came out of it.
type Build struct {
	Dir     string    `json:"dir"`
	Error   string    `json:"error,omitempty"`
	Objects []*Object `json:"objects"`
	Rules   []Rule    `json:"rules"`
}

func main() {
	flags := flag.NewFlagSet("check", flag.ContinueOnError)
	jsonOut := flags.Bool("json", false, "print the report as JSON")
	wheel := flags.String("schemas", "", "kubernetes-validate wheel holding the JSON schemas, or a directory holding it (no schema check when empty)")
	version := flags.String("kubernetes-version", "1.37.0", "Kubernetes version of the JSON schemas")
	ephemeral := flags.String("ephemeral", "", "partial container file of the kubectl debug recipe")
	printBuild := flags.Bool("print", false, "print what kustomize builds from each ROOT (a kustomization) and stop")
	if err := flags.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if flags.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: check [-json] [-schemas WHEEL|DIR] [-ephemeral FILE] ROOT...")
		os.Exit(2)
	}
	if *printBuild {
		for _, dir := range flags.Args() {
			docs, err := kustomizeBuild(dir)
			if err != nil {
				fmt.Fprintln(os.Stderr, "check:", err)
				os.Exit(1)
			}
			for _, doc := range docs {
				fmt.Printf("---\n%s", doc)
			}
		}
		return
	}
	report, err := run(flags.Args(), *wheel, *version, *ephemeral)
	if err != nil {
		fmt.Fprintln(os.Stderr, "check:", err)
		os.Exit(2)
	}
	if *jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(report)
	} else {
		printText(os.Stdout, report)
	}
	if !report.OK {
		os.Exit(1)
	}
}

func run(roots []string, wheel, version, ephemeral string) (*Report, error) {
	report := &Report{KubernetesVersion: version, Lint: []Finding{}, Problems: []string{}}
	var schemas *SchemaChecker
	if wheel != "" {
		var err error
		if schemas, err = NewSchemaChecker(wheel, version); err != nil {
			return nil, err
		}
		defer schemas.Close()
	}
	for _, root := range roots {
		dirs, err := kustomizationDirs(root)
		if err != nil {
			return nil, err
		}
		if len(dirs) == 0 {
			return nil, fmt.Errorf("no kustomization under %s", root)
		}
		for _, dir := range dirs {
			build := checkBuild(dir, schemas)
			report.Builds = append(report.Builds, build)
		}
		findings, err := lintLabels(root)
		if err != nil {
			return nil, err
		}
		report.Lint = append(report.Lint, findings...)
	}
	if ephemeral != "" {
		obj, err := checkEphemeral(ephemeral)
		if err != nil {
			return nil, err
		}
		report.Ephemeral = obj
	}
	report.Problems = problems(report)
	report.OK = len(report.Problems) == 0
	return report, nil
}

func checkBuild(dir string, schemas *SchemaChecker) *Build {
	build := &Build{Dir: dir, Objects: []*Object{}, Rules: []Rule{}}
	docs, err := kustomizeBuild(dir)
	if err != nil {
		build.Error = err.Error()
		return build
	}
	for _, doc := range docs {
		obj := checkObject(doc)
		if schemas != nil {
			obj.Schema = schemas.Check(dir, doc)
		}
		build.Objects = append(build.Objects, obj)
	}
	admit(build.Objects)
	build.Rules = sidecarRules(build.Objects)
	return build
}

// problems lists, one line each, everything that makes the report fail.
func problems(r *Report) []string {
	out := []string{}
	objectProblems := func(where string, o *Object) {
		name := fmt.Sprintf("%s: %s %s", where, o.Kind, o.Name)
		if o.DecodeError != "" {
			out = append(out, fmt.Sprintf("%s: strict decoding: %s", name, o.DecodeError))
		}
		for _, e := range o.ValidationErrors {
			out = append(out, fmt.Sprintf("%s: apiserver validation: %s", name, e))
		}
		if o.Schema.Status != "" && o.Schema.Status != "valid" {
			out = append(out, fmt.Sprintf("%s: schema %s: %s", name, o.Schema.Status, strings.Join(o.Schema.Errors, "; ")))
		}
		if o.Admission != nil && !o.Admission.Allowed {
			out = append(out, fmt.Sprintf("%s: namespace %s (enforce %s) would reject its pods: %s", name, o.Admission.Namespace, o.Admission.Enforce, o.Admission.Verdict.Summary()))
		}
	}
	for _, b := range r.Builds {
		if b.Error != "" {
			out = append(out, fmt.Sprintf("%s: kustomize build: %s", b.Dir, b.Error))
		}
		for _, o := range b.Objects {
			objectProblems(b.Dir, o)
		}
		for _, rule := range b.Rules {
			if !rule.OK {
				out = append(out, fmt.Sprintf("%s: %s: rule %s: %s", b.Dir, rule.Object, rule.Rule, rule.Detail))
			}
		}
	}
	if r.Ephemeral != nil {
		objectProblems("ephemeral recipe", r.Ephemeral)
		for _, rule := range r.Ephemeral.Rules {
			if !rule.OK {
				out = append(out, fmt.Sprintf("ephemeral recipe: rule %s: %s", rule.Rule, rule.Detail))
			}
		}
	}
	for _, f := range r.Lint {
		out = append(out, f.String())
	}
	return out
}

func printText(w io.Writer, r *Report) {
	for _, b := range r.Builds {
		fmt.Fprintf(w, "%s\n", b.Dir)
		if b.Error != "" {
			fmt.Fprintf(w, "  kustomize build failed: %s\n", b.Error)
		}
		for _, o := range b.Objects {
			fmt.Fprintf(w, "  %-14s %-28s %s\n", o.Kind, o.Name, o.Verdict())
			levels := make([]string, 0, len(o.PodSecurity))
			for level := range o.PodSecurity {
				levels = append(levels, level)
			}
			sort.Strings(levels)
			for _, level := range levels {
				fmt.Fprintf(w, "    pod security %-10s %s\n", level, o.PodSecurity[level].Summary())
			}
			if o.Admission != nil {
				fmt.Fprintf(w, "    namespace %s enforces %s: %s\n", o.Admission.Namespace, o.Admission.Enforce, o.Admission.Verdict.Summary())
			}
		}
		failed := 0
		for _, rule := range b.Rules {
			if !rule.OK {
				failed++
			}
		}
		if len(b.Rules) > 0 {
			fmt.Fprintf(w, "  sidecar rules: %d checked, %d failed\n", len(b.Rules), failed)
		}
	}
	if r.Ephemeral != nil {
		o := r.Ephemeral
		fmt.Fprintf(w, "ephemeral recipe (kubectl debug --profile=general --custom)\n  %-14s %-28s %s\n", o.Kind, o.Name, o.Verdict())
		for _, level := range []string{"baseline", "privileged", "restricted"} {
			if v, ok := o.PodSecurity[level]; ok {
				fmt.Fprintf(w, "    pod security %-10s %s\n", level, v.Summary())
			}
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "PROBLEM %s\n", p)
	}
	objects := 0
	for _, b := range r.Builds {
		objects += len(b.Objects)
	}
	verdict := "ok"
	if !r.OK {
		verdict = fmt.Sprintf("%d problem(s)", len(r.Problems))
	}
	fmt.Fprintf(w, "k8s-check: %d builds, %d objects, Kubernetes %s: %s\n", len(r.Builds), objects, r.KubernetesVersion, verdict)
}
