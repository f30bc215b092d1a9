package main

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/yannh/kubeconform/pkg/resource"
	"github.com/yannh/kubeconform/pkg/validator"
)

// SchemaResult is kubeconform's verdict on one object.
type SchemaResult struct {
	Status string   `json:"status,omitempty"` // valid, invalid, error, skipped, empty
	Errors []string `json:"errors,omitempty"`
}

// SchemaChecker validates objects with kubeconform against the strict JSON schemas shipped in
// the kubernetes-validate wheel (pinned by version and hash in check/schemas.txt). Those
// schemas identify themselves as https://kubernetes.io/api/... and point at their shared
// definitions as "/api/_definitions.json", which a JSON-schema compiler would fetch over the
// network. They are unpacked into a temporary directory with the "$id" dropped and those
// references made relative to the directory, and nothing else changed: every schema resolves
// from local files.
type SchemaChecker struct {
	dir string
	v   validator.Validator
}

func NewSchemaChecker(wheel, version string) (*SchemaChecker, error) {
	dir, err := os.MkdirTemp("", "k8s-check-schemas-")
	if err != nil {
		return nil, err
	}
	c := &SchemaChecker{dir: dir}
	if err := c.unpack(wheel, version); err != nil {
		c.Close()
		return nil, err
	}
	c.v, err = validator.New(
		[]string{filepath.Join(dir, "{{ .ResourceKind }}{{ .KindSuffix }}.json")},
		validator.Opts{Strict: true, KubernetesVersion: version},
	)
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// findWheel accepts the wheel itself or a directory holding one kubernetes_validate wheel.
func findWheel(path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("schemas: %w", err)
	}
	if !info.IsDir() {
		return path, nil
	}
	matches, _ := filepath.Glob(filepath.Join(path, "kubernetes_validate-*.whl"))
	if len(matches) != 1 {
		return "", fmt.Errorf("schemas: %s holds %d kubernetes_validate wheels, not one", path, len(matches))
	}
	return matches[0], nil
}

func (c *SchemaChecker) unpack(wheel, version string) error {
	wheel, err := findWheel(wheel)
	if err != nil {
		return err
	}
	zr, err := zip.OpenReader(wheel)
	if err != nil {
		return fmt.Errorf("schemas wheel: %w", err)
	}
	defer zr.Close()
	prefix := fmt.Sprintf("kubernetes_validate/kubernetes-json-schema/v%s-local-strict/", version)
	n := 0
	for _, f := range zr.File {
		if !strings.HasPrefix(f.Name, prefix) || strings.HasSuffix(f.Name, "/") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if data, err = localize(data); err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		if err := os.WriteFile(filepath.Join(c.dir, path.Base(f.Name)), data, 0o644); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("schemas wheel %s has no schemas for Kubernetes %s (%s)", wheel, version, prefix)
	}
	return nil
}

// localize drops a schema's "$id" and rewrites "/api/_definitions.json#..." references to
// "_definitions.json#...", so that they resolve next to the schema file.
func localize(data []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	delete(doc, "$id")
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, child := range x {
				if s, ok := child.(string); ok && k == "$ref" && strings.HasPrefix(s, "/api/_definitions.json") {
					x[k] = strings.TrimPrefix(s, "/api/")
					continue
				}
				walk(child)
			}
		case []any:
			for _, child := range x {
				walk(child)
			}
		}
	}
	walk(doc)
	return json.Marshal(doc)
}

func (c *SchemaChecker) Check(source string, doc []byte) SchemaResult {
	res := c.v.ValidateResource(resource.Resource{Path: source, Bytes: doc})
	out := SchemaResult{}
	switch res.Status {
	case validator.Valid:
		out.Status = "valid"
	case validator.Invalid:
		out.Status = "invalid"
	case validator.Error:
		out.Status = "error"
	case validator.Skipped:
		out.Status = "skipped"
	case validator.Empty:
		out.Status = "empty"
	}
	for _, e := range res.ValidationErrors {
		out.Errors = append(out.Errors, fmt.Sprintf("%s: %s", e.Path, e.Msg))
	}
	if len(out.Errors) == 0 && res.Err != nil {
		out.Errors = append(out.Errors, res.Err.Error())
	}
	return out
}

func (c *SchemaChecker) Close() {
	os.RemoveAll(c.dir)
}
