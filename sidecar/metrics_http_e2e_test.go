package sidecar_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

// TestMetricsListenServesTheDashboard: a real sidecar with --metrics-listen serves at /metrics
// the registry metrics.get renders, in the Prometheus text format; every query of the Grafana
// dashboard in deploy/grafana names only series that scrape exports; the port closes with the
// sidecar.
func TestMetricsListenServesTheDashboard(t *testing.T) {
	e := newSidecar(t, "--metrics-listen", "127.0.0.1:0")
	e.makeDataset("ds", 1000)
	expect(t, e.mutate(e.params(randID("inv-"), "ds", 1, rpc.OpCreate, "ix", "category", rpc.IndexBitmap)), rpc.PhaseNativeReturn, rpc.NativeOK)
	addr := metricsAddr(t, e)

	scraped := scrapeNames(t, "http://"+addr+"/metrics")
	text, err := e.c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	viaRPC := parseNames(t, strings.NewReader(text))
	for name := range viaRPC {
		if !scraped[name] {
			t.Errorf("metrics.get has %s, the scrape does not: not the same registry", name)
		}
	}

	exprs := dashboardQueries(t, "../deploy/grafana/steward.json")
	if len(exprs) < 10 {
		t.Fatalf("only %d queries found in the dashboard", len(exprs))
	}
	for _, q := range exprs {
		names := promqlMetricNames(q)
		if len(names) == 0 {
			t.Errorf("query %q names no metric: the check would prove nothing", q)
		}
		for _, n := range names {
			if !scraped[n] {
				t.Errorf("query %q names %s, which the sidecar does not export", q, n)
			}
		}
	}
	t.Logf("%d dashboard queries checked against %d exported series names", len(exprs), len(scraped))

	e.c.Close()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after the sidecar exited", addr)
	}
}

// TestMetricsListenerStopsOnClose: an in-process sidecar's listener goroutine ends in Close,
// and a scrape before it is the Prometheus exposition.
func TestMetricsListenerStopsOnClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv, err := sidecar.New(sidecar.Config{DisableIsolation: true, DisableParentWatch: true, StateDir: t.TempDir(),
		Logger: hclog.NewNullLogger(), MetricsListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.MetricsAddr().String()
	if names := scrapeNames(t, "http://"+addr+"/metrics"); !names["steward_build_info"] {
		t.Fatalf("scrape lacks steward_build_info: %v", names)
	}
	http.DefaultClient.CloseIdleConnections()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Close", addr)
	}
	if _, err := sidecar.New(sidecar.Config{DisableIsolation: true, DisableParentWatch: true, StateDir: t.TempDir(),
		Logger: hclog.NewNullLogger(), MetricsListen: "localhost"}); err == nil {
		t.Fatal("New accepted a metrics address without a port")
	}
}

func TestResolveMetricsAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"9464", "127.0.0.1:9464"},
		{":9464", "127.0.0.1:9464"},
		{"localhost:9464", "127.0.0.1:9464"},
		{"0.0.0.0:9464", "0.0.0.0:9464"},
		{"[::]:9464", "[::]:9464"},
		{"10.1.2.3:9464", "10.1.2.3:9464"},
		{"[::1]:0", "[::1]:0"},
		{"localhost", ""},
		{"9464x", ""},
		{"host:70000", ""},
		{"", ""},
	} {
		got, err := sidecar.ResolveMetricsAddr(tc.in)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("ResolveMetricsAddr(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// metricsAddr reads the bound address from the sidecar's "serving metrics" log line.
func metricsAddr(t *testing.T, e *sidecarEnv) string {
	t.Helper()
	for _, line := range strings.Split(e.logs.String(), "\n") {
		var entry struct {
			Message string `json:"@message"`
			Addr    string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Message == "serving metrics" {
			return entry.Addr
		}
	}
	t.Fatal("no \"serving metrics\" line in the sidecar's log")
	return ""
}

// scrapeNames GETs a Prometheus endpoint and returns the names of the series it exports.
func scrapeNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %q: %.200s", url, resp.Status, resp.Header.Get("Content-Type"), b)
	}
	return parseNames(t, resp.Body)
}

// parseNames parses the text exposition into series names: a histogram's family f exports
// f_bucket, f_sum and f_count, a summary f, f_sum and f_count.
func parseNames(t *testing.T, r io.Reader) map[string]bool {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	names := map[string]bool{}
	for name, f := range families {
		switch f.GetType().String() {
		case "HISTOGRAM":
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case "SUMMARY":
			names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
		default:
			names[name] = true
		}
	}
	return names
}

// dashboardQueries returns every PromQL expression of a Grafana dashboard: the panels' targets
// (rows nested too) and the query variables' definitions.
func dashboardQueries(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				walk(c, k)
			}
		case []any:
			for _, c := range v {
				walk(c, key)
			}
		case string:
			if key == "expr" || key == "definition" {
				out = append(out, v)
			}
		}
	}
	walk(doc, "")
	return out
}

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlGrafana  = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlTokens   = regexp.MustCompile(`\d[\w.]*|[A-Za-z_:][\w:]*\s*\(?`)
	promqlWords    = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
)

// promqlMetricNames returns the metric names a PromQL expression (or a Grafana
// label_values(metric, label) definition) selects: identifiers that are not functions,
// aggregations, keywords, grouping labels, label matchers, durations, strings or numbers.
func promqlMetricNames(q string) []string {
	if rest, ok := strings.CutPrefix(q, "label_values("); ok {
		metric, _, _ := strings.Cut(rest, ",")
		return []string{strings.TrimSpace(metric)}
	}
	q = promqlStrings.ReplaceAllString(q, `""`)
	q = promqlGrafana.ReplaceAllString(q, "")
	q = promqlMatchers.ReplaceAllString(q, "")
	q = promqlGrouping.ReplaceAllString(q, "")
	var names []string
	for _, tok := range promqlTokens.FindAllString(q, -1) {
		if tok[0] >= '0' && tok[0] <= '9' || strings.HasSuffix(tok, "(") || slices.Contains(promqlWords, tok) {
			continue
		}
		names = append(names, tok)
	}
	return names
}
