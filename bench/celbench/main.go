// celbench: what a ValidatingAdmissionPolicy's CEL costs the kube-apiserver per admitted Pod,
// measured in-process against k8s.io/apiserver v0.34.4 (the version the tests' apiserver runs).
//
// Each policy of a manifest that matches Pods is compiled the way the validating policy plugin's
// compilePolicy does (composited compiler, the base environment at the default compatibility
// version, strict cost: the StrictCostEnforcementForVAP gate is GA and locked on) and evaluated
// with the plugin's Validate on a GPU pod (one container, 2 GiB gpu-mem + 30 % core) and a non-GPU
// pod, each with the fields the apiserver's defaulting and the ServiceAccount plugin add. Printed:
//   - the conversion of the pod (runtime.DefaultUnstructuredConverter.ToUnstructured), which the
//     plugin does for every evaluation stage (matchConditions, validations, messageExpressions,
//     auditAnnotations: four times per matched request), and one stage's whole fixed work (an empty
//     stage: the object, the request and the namespace converted);
//   - the whole Validate;
//   - each matchCondition, each variable (forced alone, with what it reads, and incrementally in
//     declaration order), each validation and each messageExpression (with every variable already
//     forced, less that).
//
// Figures are CPU time (getrusage, so waiting for a CPU on a shared host does not count), the least
// of -rounds rounds of at least 50 ms each, and allocations per call (exact: they do not vary).
// Differences of a few microseconds are noise; the allocations are the reproducible figure.
//
//	cd bench/celbench && GOMAXPROCS=1 go run . -policy ../../manifests/webhook/policy.yaml
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"
)

func pod(name string, gpu bool) *corev1.Pod {
	limits := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	if gpu {
		limits = corev1.ResourceList{
			"aliyun.com/gpu-mem":             resource.MustParse("2"),
			"aliyun.com/gpu-core.percentage": resource.MustParse("30"),
		}
	}
	grace := int64(30)
	tolSec := int64(300)
	expiry := int64(3607)
	mode := int32(420)
	enable := true
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "gpushare-bench", CreationTimestamp: metav1.Now(), UID: "0b7c1d7e-4f6a-4d59-9a0c-3a4f2b1c0d9e"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"gpushare.io/schedule": "core-mem"},
			Containers: []corev1.Container{{
				Name: "cuda-sample", Image: "registry.cn-beijing.aliyuncs.com/ai-samples/gpushare-sample:benchmark",
				Resources:                corev1.ResourceRequirements{Limits: limits, Requests: limits.DeepCopy()},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy:          corev1.PullIfNotPresent,
				VolumeMounts:             []corev1.VolumeMount{{Name: "kube-api-access-x7k2p", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}},
			}},
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			DNSPolicy:                     corev1.DNSClusterFirst,
			ServiceAccountName:            "default",
			SecurityContext:               &corev1.PodSecurityContext{},
			SchedulerName:                 "default-scheduler",
			EnableServiceLinks:            &enable,
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tolSec},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tolSec},
			},
			Volumes: []corev1.Volume{{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: &mode,
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: &expiry, Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
				},
			}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort},
	}
}

type compiled struct {
	compiler  *plugincel.CompositedCompiler
	validator validating.Validator
	vars      bool
}

// compile is validating.compilePolicy (plugin.go) with strictCost = true and no params.
func compile(p *admissionregistrationv1.ValidatingAdmissionPolicy) compiled {
	optionalVars := plugincel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: true, StrictCost: true}
	exprVars := plugincel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: false, StrictCost: true}
	env, err := plugincel.NewCompositionEnv(plugincel.VariablesTypeName, environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion(), true))
	must(err)
	fc := plugincel.NewCompositedCompilerFromTemplate(env)
	var named []plugincel.NamedExpressionAccessor
	for _, v := range p.Spec.Variables {
		named = append(named, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	fc.CompileAndStoreVariables(named, optionalVars, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if len(p.Spec.MatchConditions) > 0 {
		acc := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
		for i := range p.Spec.MatchConditions {
			acc[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
		}
		matcher = matchconditions.NewMatcher(fc.CompileCondition(acc, optionalVars, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	vals := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	msgs := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		vals[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			msgs[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	val := validating.NewValidator(
		fc.CompileCondition(vals, optionalVars, environment.StoredExpressions),
		matcher,
		fc.CompileCondition(nil, optionalVars, environment.StoredExpressions),
		fc.CompileCondition(msgs, exprVars, environment.StoredExpressions),
		p.Spec.FailurePolicy,
	)
	return compiled{compiler: fc, validator: val, vars: len(p.Spec.Variables) > 0}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "celbench:", err)
		os.Exit(2)
	}
}

var ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpushare-bench", Labels: map[string]string{"kubernetes.io/metadata.name": "gpushare-bench"}}}
var gvr = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
var gvk = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}

func attrs(p *corev1.Pod) *admission.VersionedAttributes {
	a := admission.NewAttributesRecord(p, nil, gvk, p.Namespace, p.Name, gvr, "", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "bench"})
	return &admission.VersionedAttributes{Attributes: a, VersionedKind: gvk, VersionedObject: p}
}

// ns_ is the CPU time per call (getrusage: the process's user + system time, so waiting for a CPU
// on a shared host does not count, the garbage collector's work does), the least over *rounds*
// rounds of at least 50 ms of CPU each. Allocations per call are counted once (they do not vary).
func ns_(f func()) float64 {
	n := 1
	for {
		t := cpu()
		for i := 0; i < n; i++ {
			f()
		}
		if d := cpu() - t; d >= 20e6 {
			n = int(float64(n)*50e6/float64(d)) + 1
			break
		}
		n *= 4
	}
	best := 0.0
	for round := 0; round < *rounds; round++ {
		t := cpu()
		for i := 0; i < n; i++ {
			f()
		}
		v := float64(cpu()-t) / float64(n)
		if round == 0 || v < best {
			best = v
		}
	}
	var m0, m1 goruntime.MemStats
	goruntime.ReadMemStats(&m0)
	for i := 0; i < 20; i++ {
		f()
	}
	goruntime.ReadMemStats(&m1)
	lastAllocs = float64(m1.Mallocs-m0.Mallocs) / 20
	return best
}

var lastAllocs float64

func cpu() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

var rounds = flag.Int("rounds", 5, "rounds per figure (the least is reported)")
var extra = flag.String("extra", "", "a file of extra expressions (one a line) to time on each pod, after all variables are forced")

// timeExprs: ns per ForInput of these expressions in one composition context (fresh per call).
func timeExprs(fc *plugincel.CompositedCompiler, exprs []string, va *admission.VersionedAttributes, msg bool) (float64, string) {
	acc := make([]plugincel.ExpressionAccessor, len(exprs))
	for i, e := range exprs {
		if msg {
			acc[i] = &validating.MessageExpressionCondition{MessageExpression: e}
		} else {
			acc[i] = &validating.ValidationCondition{Expression: e}
		}
	}
	decl := plugincel.OptionalVariableDeclarations{HasAuthorizer: !msg, StrictCost: true}
	cond := fc.CompileCondition(acc, decl, environment.StoredExpressions)
	req := plugincel.CreateAdmissionRequest(va.Attributes, metav1.GroupVersionResource(gvr), metav1.GroupVersionKind(gvk))
	ctx := context.Background()
	res, _, err := cond.ForInput(ctx, va, req, plugincel.OptionalVariableBindings{}, ns, celconfig.RuntimeCELCostBudget)
	must(err)
	out := ""
	if len(res) > 0 {
		r := res[len(res)-1]
		if r.Error != nil {
			out = "ERROR " + r.Error.Error()
		} else {
			out = fmt.Sprint(r.EvalResult)
		}
	}
	t := ns_(func() {
		_, _, _ = cond.ForInput(ctx, va, req, plugincel.OptionalVariableBindings{}, ns, celconfig.RuntimeCELCostBudget)
	})
	return t, out
}

func short(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func main() {
	path := flag.String("policy", "manifests/webhook/policy.yaml", "policy manifest (YAML stream)")
	testing.Init()
	flag.Parse()
	must(flag.Set("test.benchtime", "100ms"))
	data, err := os.ReadFile(*path)
	must(err)
	var policies []*admissionregistrationv1.ValidatingAdmissionPolicy
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta metav1.TypeMeta
		must(yaml.Unmarshal([]byte(doc), &meta))
		if meta.Kind != "ValidatingAdmissionPolicy" {
			continue
		}
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		must(yaml.Unmarshal([]byte(doc), p))
		policies = append(policies, p)
	}
	gpu, plain := pod("cuda-sample", true), pod("plain", false)
	fmt.Printf("conversion of the pod (ToUnstructured), GPU: %.0f ns, non-GPU: %.0f ns\n",
		ns_(func() { _, _ = runtime.DefaultUnstructuredConverter.ToUnstructured(gpu) }),
		ns_(func() { _, _ = runtime.DefaultUnstructuredConverter.ToUnstructured(plain) }))
	for _, p := range policies {
		pods := false
		for _, r := range p.Spec.MatchConstraints.ResourceRules {
			for _, res := range r.Resources {
				pods = pods || (res == "pods" && len(r.APIGroups) > 0 && r.APIGroups[0] == "")
			}
		}
		fmt.Printf("\n== policy %s (%d matchConditions, %d variables, %d validations; pods: %v)\n", p.Name, len(p.Spec.MatchConditions), len(p.Spec.Variables), len(p.Spec.Validations), pods)
		if !pods {
			continue
		}
		c := compile(p)
		for _, pc := range []struct {
			name string
			p    *corev1.Pod
		}{{"GPU", gpu}, {"non-GPU", plain}} {
			va := attrs(pc.p)
			ctx := context.Background()
			res := c.validator.Validate(ctx, gvr, va, nil, ns, celconfig.RuntimeCELCostBudget, nil)
			var decisions []string
			for _, d := range res.Decisions {
				decisions = append(decisions, string(d.Action)+":"+short(d.Message, 80))
			}
			whole := ns_(func() { c.validator.Validate(ctx, gvr, va, nil, ns, celconfig.RuntimeCELCostBudget, nil) })
			wholeA := lastAllocs
			empty, _ := timeExprs(c.compiler, nil, va, false)
			emptyA := lastAllocs
			fmt.Printf("-- %s pod: whole Validate %.0f ns, %.0f allocs (decisions %v); one empty ForInput (activation: conversions) %.0f ns, %.0f allocs\n", pc.name, whole, wholeA, decisions, empty, emptyA)
			for _, m := range p.Spec.MatchConditions {
				t, out := timeExprs(c.compiler, []string{m.Expression}, va, false)
				fmt.Printf("   matchCondition %-28s %8.0f ns %6.0f allocs (%s; %d chars)\n", m.Name, t-empty, lastAllocs-emptyA, out, len(m.Expression))
			}
			var forced []string
			prev, prevA := empty, emptyA
			for _, v := range p.Spec.Variables {
				alone, _ := timeExprs(c.compiler, []string{"type(variables." + v.Name + ") != null_type"}, va, false)
				aloneA := lastAllocs
				forced = append(forced, "type(variables."+v.Name+") != null_type")
				chain, _ := timeExprs(c.compiler, []string{strings.Join(forced, " && ")}, va, false)
				fmt.Printf("   variable %-20s alone (with what it reads) %8.0f ns %6.0f allocs, incremental %8.0f ns %6.0f allocs (%d chars)\n", v.Name, alone-empty, aloneA-emptyA, chain-prev, lastAllocs-prevA, len(v.Expression))
				prev, prevA = chain, lastAllocs
			}
			force := []string{"true"}
			if len(forced) > 0 {
				force = []string{strings.Join(forced, " && ")}
			}
			base, _ := timeExprs(c.compiler, force, va, false)
			baseA := lastAllocs
			// a messageExpression must be a string: the same forcing, as one.
			forceMsg := []string{"(" + force[0] + ") ? '' : ''"}
			baseMsg, _ := timeExprs(c.compiler, forceMsg, va, true)
			baseMsgA := lastAllocs
			sumV, sumM := 0.0, 0.0
			for i, v := range p.Spec.Validations {
				t, out := timeExprs(c.compiler, append(append([]string{}, force...), v.Expression), va, false)
				tA := lastAllocs
				tm, outm := timeExprs(c.compiler, append(append([]string{}, forceMsg...), v.MessageExpression), va, true)
				sumV += t - base
				sumM += tm - baseMsg
				fmt.Printf("   validation %d %-44s %8.0f ns %5.0f allocs (%s), its messageExpression %8.0f ns %5.0f allocs (%d chars: %s)\n", i, short(v.Message, 44), t-base, tA-baseA, out, tm-baseMsg, lastAllocs-baseMsgA, len(v.MessageExpression), short(outm, 60))
			}
			fmt.Printf("   validations together %.0f ns, messageExpressions together %.0f ns\n", sumV, sumM)
			if *extra != "" {
				text, err := os.ReadFile(*extra)
				must(err)
				for _, e := range strings.Split(strings.TrimSpace(string(text)), "\n") {
					t, out := timeExprs(c.compiler, append(append([]string{}, forceMsg...), e), va, true)
					if strings.HasPrefix(out, "ERROR") {
						if i := strings.Index(out, "resulted in error"); i >= 0 {
							out = "ERROR …" + out[i:]
						} else {
							out = "ERROR …" + out[max(0, len(out)-300):]
						}
					}
					fmt.Printf("   extra %8.0f ns %5.0f allocs (%s): %s\n", t-baseMsg, lastAllocs-baseMsgA, short(out, 300), short(e, 100))
				}
			}
		}
	}
}
