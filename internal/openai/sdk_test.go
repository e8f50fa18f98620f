package openai_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pipeshard/pipeshard/internal/cli"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// sdkVersion is the official openai npm package the acceptance test
// installs.
const sdkVersion = "6.49.0"

// sdkScript is the client: every call the acceptance test checks, its
// results printed as one JSON object.
const sdkScript = `import OpenAI from 'openai';
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'unused', maxRetries: 0 });
const prompt = process.env.PROMPT, max_tokens = Number(process.env.MAX_TOKENS);
const out = {};
out.models = (await client.models.list()).data.map(m => m.id);
const c = await client.completions.create({ model: 'stories15M', prompt, max_tokens, temperature: 0 });
out.completion = { text: c.choices[0].text, finish: c.choices[0].finish_reason, usage: c.usage };
let text = '', finish = null, usage = null, chunks = 0;
for await (const ch of await client.completions.create({ model: 'stories15M', prompt, max_tokens, temperature: 0, stream: true, stream_options: { include_usage: true } })) {
  chunks++;
  for (const x of ch.choices) { text += x.text; if (x.finish_reason) finish = x.finish_reason; }
  if (ch.usage) usage = ch.usage;
}
out.completion_stream = { text, finish, usage, chunks };
const messages = [{ role: 'user', content: prompt }];
const r = await client.chat.completions.create({ model: 'stories15M', messages, max_tokens, temperature: 0 });
out.chat = { text: r.choices[0].message.content, role: r.choices[0].message.role, finish: r.choices[0].finish_reason, usage: r.usage };
text = ''; finish = null; usage = null; chunks = 0;
for await (const ch of await client.chat.completions.create({ model: 'stories15M', messages, max_completion_tokens: max_tokens, temperature: 0, stream: true, stream_options: { include_usage: true } })) {
  chunks++;
  for (const x of ch.choices) { text += x.delta.content ?? ''; if (x.finish_reason) finish = x.finish_reason; }
  if (ch.usage) usage = ch.usage;
}
out.chat_stream = { text, finish, usage, chunks };
// Without include_usage the stream still ends with the usage, on the last
// finish chunk; the SDK's stream helper accumulates it.
const helper = client.chat.completions.stream({ model: 'stories15M', messages, max_tokens, temperature: 0 });
chunks = 0;
helper.on('chunk', () => chunks++);
const fc = await helper.finalChatCompletion();
out.chat_helper = { text: fc.choices[0].message.content, role: fc.choices[0].message.role, finish: fc.choices[0].finish_reason, usage: fc.usage ?? null, chunks };
text = ''; finish = null; usage = null; chunks = 0;
for await (const ch of await client.completions.create({ model: 'stories15M', prompt, max_tokens, temperature: 0, stream: true })) {
  chunks++;
  for (const x of ch.choices) { text += x.text; if (x.finish_reason) finish = x.finish_reason; }
  if (ch.usage) usage = ch.usage;
}
out.completion_stream_plain = { text, finish, usage, chunks };
try {
  await client.chat.completions.create({ model: 'gpt-4o', messages });
} catch (e) {
  out.error = { status: e.status, code: e.code, message: e.message };
}
console.log(JSON.stringify(out));
`

// needTool fails under CI and skips elsewhere when a tool is missing.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing and CI is set: .ci/run installs it", name)
		}
		t.Skipf("%s is missing", name)
	}
	return p
}

// installSDK installs the openai package into a cache directory once.
func installSDK(t *testing.T) string {
	t.Helper()
	npm := needTool(t, "npm")
	dir := filepath.Join(testmodel.Home(), "npm", "openai-"+sdkVersion)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err == nil {
		return dir
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--prefix", dir, "openai@"+sdkVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install openai@%s: %v\n%s", sdkVersion, err, out)
	}
	return dir
}

// TestOpenAISDK is the acceptance test: the official openai SDK, on
// node, against `pipeshard swarm serve` on a 3-node local swarm, for
// completions and chat, streamed (with and without include_usage, and
// through the SDK's stream helper) and not. Greedy text equals local
// generation, and every response ends with the usage.
func TestOpenAISDK(t *testing.T) {
	node := needTool(t, "node")
	dir := installSDK(t)
	f := getFixture(t)

	// The command itself, in process, as a user runs it.
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	exited := make(chan int, 1)
	var stderr strings.Builder
	go func() {
		exited <- cli.Main(ctx, []string{"swarm", "serve", "--listen", "127.0.0.1:0", "--bootstrap", strings.Join(f.nodes[1].Addrs(), ","),
			"--model", f.st.MC.String(), "--home", t.TempDir(), "--p2p-listen", "/ip4/127.0.0.1/tcp/0"}, pw, &lockedWriter{w: &stderr})
		pw.Close()
	}()
	defer func() {
		cancel()
		if code := <-exited; code != cli.ExitInterrupted {
			t.Errorf("swarm serve exited %d after the interrupt, want %d", code, cli.ExitInterrupted)
		}
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("swarm serve printed no address: %v\n%s", err, stderr.String())
	}
	go io.Copy(io.Discard, pr)
	i := strings.Index(line, "http://")
	if i < 0 {
		t.Fatalf("swarm serve said %q", line)
	}
	base := strings.TrimSpace(line[i:])
	t.Logf("%s", strings.TrimSpace(line))

	const maxTokens = 24
	prompt := f.tok.Encode(story, true)
	want := f.text(prompt, f.local(t, prompt, maxTokens, sample.Params{}))

	script := filepath.Join(dir, fmt.Sprintf("acceptance-%d.mjs", os.Getpid()))
	if err := os.WriteFile(script, []byte(sdkScript), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(script)
	nctx, ncancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer ncancel()
	cmd := exec.CommandContext(nctx, node, script)
	cmd.Env = append(os.Environ(), "BASE_URL="+base, "PROMPT="+story, fmt.Sprint("MAX_TOKENS=", maxTokens))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s\nserver log:\n%s", script, err, out, stderr.String())
	}
	type result struct {
		Text   string `json:"text"`
		Role   string `json:"role"`
		Finish string `json:"finish"`
		Chunks int    `json:"chunks"`
		Usage  *struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Total      int `json:"total_tokens"`
		} `json:"usage"`
	}
	var got struct {
		Models           []string `json:"models"`
		Completion       result   `json:"completion"`
		CompletionStream result   `json:"completion_stream"`
		Chat             result   `json:"chat"`
		ChatStream       result   `json:"chat_stream"`
		ChatHelper       result   `json:"chat_helper"`
		CompletionPlain  result   `json:"completion_stream_plain"`
		Error            struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("SDK output: %s", out)
	if len(got.Models) != 1 || got.Models[0] != "stories15M" {
		t.Fatalf("models %v", got.Models)
	}
	for name, r := range map[string]result{"completion": got.Completion, "completion stream": got.CompletionStream, "chat": got.Chat, "chat stream": got.ChatStream,
		"chat stream helper": got.ChatHelper, "completion stream without include_usage": got.CompletionPlain} {
		if r.Text != want || r.Finish != "length" {
			t.Errorf("%s: %q (%s), want %q (length)", name, r.Text, r.Finish, want)
		}
		if r.Usage == nil || r.Usage.Prompt != len(prompt) || r.Usage.Completion != maxTokens || r.Usage.Total != len(prompt)+maxTokens {
			t.Errorf("%s: usage %+v", name, r.Usage)
		}
		if strings.Contains(name, "stream") && r.Chunks < maxTokens/2 {
			t.Errorf("%s: %d chunks for %d tokens", name, r.Chunks, maxTokens)
		}
	}
	if got.Chat.Role != "assistant" || got.ChatHelper.Role != "assistant" {
		t.Errorf("chat role %q, stream helper's %q", got.Chat.Role, got.ChatHelper.Role)
	}
	if got.Error.Status != 404 || got.Error.Code != "model_not_found" {
		t.Errorf("unknown model: the SDK saw %+v", got.Error)
	}

	// Beside the API, on the same address: Prometheus metrics that
	// counted every token the SDK was sent and show no session left
	// open, and the dashboard.
	root := strings.TrimSuffix(base, "/v1")
	resp, err := http.Get(root + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	value := func(name string) float64 {
		f := fams[name]
		if f == nil || len(f.Metric) != 1 {
			t.Fatalf("/metrics has no single %s", name)
		}
		if c := f.Metric[0].GetCounter(); c != nil {
			return c.GetValue()
		}
		return f.Metric[0].GetGauge().GetValue()
	}
	const generations = 6 // the SDK calls above that generate
	if n := value("pipeshard_client_tokens_total"); n != generations*maxTokens {
		t.Errorf("pipeshard_client_tokens_total %v, want %d", n, generations*maxTokens)
	}
	if n := value("pipeshard_client_sessions"); n != 0 {
		t.Errorf("pipeshard_client_sessions %v after every request ended, want 0", n)
	}
	page, err := http.Get(root + "/")
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if ct := page.Header.Get("Content-Type"); page.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/html") {
		t.Errorf("GET /: %s, %s; want the dashboard", page.Status, ct)
	}
}
