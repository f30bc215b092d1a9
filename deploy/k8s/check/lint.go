package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Finding is a problem in a YAML source file, with its place.
type Finding struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Message string `json:"message"`
}

func (f Finding) String() string {
	return fmt.Sprintf("%s:%d: %s", f.File, f.Line, f.Message)
}

// labelMaps are the keys whose values are maps of label values: object and template labels,
// label selectors, a Service's selector, kustomize's label pairs.
var labelMaps = map[string]bool{"labels": true, "matchLabels": true, "selector": true, "pairs": true, "commonLabels": true}

// lintLabels reports label values written as plain YAML scalars. Quoting every label value
// keeps `true`, `on`, `1.10` or `0755` from becoming a bool or a number on the way to a label
// (which must be a string) in any YAML parser, and keeps the manifests uniform.
func lintLabels(root string) ([]Finding, error) {
	var findings []Finding
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		ext := filepath.Ext(path)
		if d.IsDir() || (ext != ".yaml" && ext != ".yml") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc yaml.Node
			if err := dec.Decode(&doc); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				findings = append(findings, Finding{File: path, Message: "not YAML: " + err.Error()})
				break
			}
			findings = append(findings, walkLabels(path, &doc, false)...)
		}
		return nil
	})
	return findings, err
}

func walkLabels(file string, n *yaml.Node, inLabels bool) []Finding {
	var out []Finding
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			out = append(out, walkLabels(file, c, false)...)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			if inLabels && value.Kind == yaml.ScalarNode {
				if value.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
					out = append(out, Finding{
						File: file, Line: value.Line,
						Message: fmt.Sprintf("label value %s: %s is not quoted; write %q", key.Value, value.Value, value.Value),
					})
				}
				continue
			}
			out = append(out, walkLabels(file, value, labelMaps[key.Value] && !strings.HasPrefix(key.Value, "$"))...)
		}
	}
	return out
}
