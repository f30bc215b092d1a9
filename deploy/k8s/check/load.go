package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

var kustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// kustomizationDirs lists the directories under root holding a Kustomization (not a
// Component: components are built as part of the kustomizations that use them).
func kustomizationDirs(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		for _, name := range kustomizationFiles {
			data, err := os.ReadFile(filepath.Join(path, name))
			if err != nil {
				continue
			}
			var head struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal(data, &head); err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(path, name), err)
			}
			if head.Kind == "" || head.Kind == "Kustomization" {
				dirs = append(dirs, path)
			}
			break
		}
		return nil
	})
	sort.Strings(dirs)
	return dirs, err
}

// kustomizeBuild runs `kustomize build DIR` in process and returns each object as YAML.
func kustomizeBuild(dir string) ([][]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	var docs [][]byte
	for _, res := range resMap.Resources() {
		doc, err := res.AsYAML()
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
	return docs, nil
}
