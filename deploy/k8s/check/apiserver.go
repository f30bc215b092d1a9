package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/registry/apps/daemonset"
	"k8s.io/kubernetes/pkg/registry/apps/deployment"
	"k8s.io/kubernetes/pkg/registry/apps/statefulset"
	"k8s.io/kubernetes/pkg/registry/core/configmap"
	"k8s.io/kubernetes/pkg/registry/core/namespace"
	"k8s.io/kubernetes/pkg/registry/core/secret"
	"k8s.io/kubernetes/pkg/registry/core/service"
	"k8s.io/kubernetes/pkg/registry/core/serviceaccount"
	"k8s.io/kubernetes/pkg/registry/networking/networkpolicy"

	// The API groups the manifests use, registered in the apiserver's scheme with their
	// conversions and defaults.
	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	_ "k8s.io/kubernetes/pkg/apis/networking/install"
)

// Object is one manifest object and every verdict on it.
type Object struct {
	Kind             string             `json:"kind"`
	APIVersion       string             `json:"api_version"`
	Name             string             `json:"name"`
	Namespace        string             `json:"namespace,omitempty"`
	DecodeError      string             `json:"decode_error,omitempty"`
	ValidationErrors []string           `json:"validation_errors"`
	Warnings         []string           `json:"warnings"`
	Schema           SchemaResult       `json:"schema"`
	PodSecurity      map[string]Verdict `json:"pod_security,omitempty"`
	Admission        *Admission         `json:"admission,omitempty"`
	Rules            []Rule             `json:"rules,omitempty"`

	// versioned is the strictly decoded, defaulted k8s.io/api object (nil if decoding failed).
	versioned runtime.Object
}

// Verdict sums up the result of the object's other checks in one word, for the text report.
func (o *Object) Verdict() string {
	switch {
	case o.DecodeError != "":
		return "REJECTED by strict decoding"
	case len(o.ValidationErrors) > 0:
		return fmt.Sprintf("INVALID (%d apiserver validation errors)", len(o.ValidationErrors))
	case o.Schema.Status != "" && o.Schema.Status != "valid":
		return "schema " + strings.ToUpper(o.Schema.Status)
	}
	verdict := "valid (strict decode, apiserver validation"
	if o.Schema.Status == "valid" {
		verdict += ", schema"
	}
	verdict += ")"
	if len(o.Warnings) > 0 {
		verdict += fmt.Sprintf(", %d warnings", len(o.Warnings))
	}
	return verdict
}

// strictCodecs decode into the versioned types of the apiserver's scheme (no conversion) and
// report unknown and duplicate fields as errors, like kube-apiserver with
// fieldValidation=Strict (what `kubectl apply --validate=strict` asks for).
var strictCodecs = serializer.NewCodecFactory(legacyscheme.Scheme, serializer.EnableStrict)

// strategies are the apiserver's create strategies for the kinds sidecar's manifests use.
var strategies = map[schema.GroupKind]rest.RESTCreateStrategy{
	{Group: "", Kind: "Namespace"}:                      namespace.Strategy,
	{Group: "", Kind: "Service"}:                        service.Strategy,
	{Group: "", Kind: "Secret"}:                         secret.Strategy,
	{Group: "", Kind: "ConfigMap"}:                      configmap.Strategy,
	{Group: "", Kind: "ServiceAccount"}:                 serviceaccount.Strategy,
	{Group: "apps", Kind: "Deployment"}:                 deployment.Strategy,
	{Group: "apps", Kind: "StatefulSet"}:                statefulset.Strategy,
	{Group: "apps", Kind: "DaemonSet"}:                  daemonset.Strategy,
	{Group: "networking.k8s.io", Kind: "NetworkPolicy"}: networkpolicy.Strategy,
}

// resources names the REST resource of each kind, for the request context.
var resources = map[string]string{
	"Namespace": "namespaces", "Service": "services", "Secret": "secrets", "ConfigMap": "configmaps",
	"ServiceAccount": "serviceaccounts", "Deployment": "deployments", "StatefulSet": "statefulsets",
	"DaemonSet": "daemonsets", "NetworkPolicy": "networkpolicies",
}

func checkObject(doc []byte) *Object {
	obj := &Object{ValidationErrors: []string{}, Warnings: []string{}}
	versioned, gvk, err := strictCodecs.UniversalDeserializer().Decode(doc, nil, nil)
	if gvk != nil {
		obj.Kind, obj.APIVersion = gvk.Kind, gvk.GroupVersion().String()
	}
	if versioned != nil {
		if accessor, err := meta.Accessor(versioned); err == nil {
			obj.Name, obj.Namespace = accessor.GetName(), accessor.GetNamespace()
		}
	}
	if err != nil {
		obj.DecodeError = err.Error()
		return obj
	}
	legacyscheme.Scheme.Default(versioned)
	obj.versioned = versioned
	obj.ValidationErrors, obj.Warnings = validateCreate(versioned, *gvk)
	if spec, podMeta := podTemplate(versioned); spec != nil {
		obj.PodSecurity = evaluateAllLevels(podMeta, spec)
	}
	return obj
}

// validateCreate runs what kube-apiserver runs on a create request between decoding and
// admission: conversion to the internal type, then rest.BeforeCreate with the kind's registry
// strategy (PrepareForCreate, the strategy's Validate, object-meta validation, declarative
// validation, WarningsOnCreate).
func validateCreate(versioned runtime.Object, gvk schema.GroupVersionKind) (errs []string, warnings []string) {
	strategy, ok := strategies[gvk.GroupKind()]
	if !ok {
		return []string{fmt.Sprintf("the checker has no apiserver strategy for %s", gvk.GroupKind())}, nil
	}
	internal, err := legacyscheme.Scheme.ConvertToVersion(versioned.DeepCopyObject(), schema.GroupVersion{Group: gvk.Group, Version: runtime.APIVersionInternal})
	if err != nil {
		return []string{"conversion to the internal version: " + err.Error()}, nil
	}
	accessor, err := meta.Accessor(internal)
	if err != nil {
		return []string{err.Error()}, nil
	}
	ns := accessor.GetNamespace()
	if strategy.NamespaceScoped() && ns == "" {
		ns = "default" // what kubectl sends for an object without a namespace
		accessor.SetNamespace(ns)
	}
	if !strategy.NamespaceScoped() {
		ns = ""
	}
	rest.FillObjectMetaSystemFields(accessor)
	recorder := &warnings_{}
	ctx := genericapirequest.WithNamespace(context.Background(), ns)
	ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "k8s-check"})
	ctx = genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: "create", APIGroup: gvk.Group, APIVersion: gvk.Version,
		Resource: resources[gvk.Kind], Namespace: ns, Name: accessor.GetName(),
	})
	ctx = warning.WithWarningRecorder(ctx, recorder)
	errs = []string{}
	if err := rest.BeforeCreate(strategy, ctx, internal); err != nil {
		errs = statusCauses(err)
	}
	return errs, recorder.list()
}

// statusCauses splits an Invalid status error into one line per field error.
func statusCauses(err error) []string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if details := status.Status().Details; details != nil && len(details.Causes) > 0 {
			out := make([]string, 0, len(details.Causes))
			for _, cause := range details.Causes {
				out = append(out, fmt.Sprintf("%s: %s", cause.Field, cause.Message))
			}
			return out
		}
	}
	return []string{err.Error()}
}

// warnings_ collects the warnings the strategies add, as the apiserver's response would carry.
type warnings_ struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings_) AddWarning(_, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings_) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string{}, w.msgs...)
}
