package models

import (
	"fmt"
	"reflect"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/apperr"
)

func TestVendors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"nothing set", nil, nil},
		{"models without keys", map[string]string{"OPENAI_MODEL": "gpt-4o", "OPENAI_RESPONSES_MODEL": "gpt-5", "ANTHROPIC_MODEL": "claude-opus-4-1"}, nil},
		{"OpenAI key", map[string]string{"OPENAI_API_KEY": "sk-1"}, []string{"openai:gpt-4o-mini"}},
		{"Ollama by base URL", map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1", "OPENAI_MODEL": "llama3.1:8b, qwen2.5-coder:7b,,llama3.1:8b"},
			[]string{"openai:llama3.1:8b", "openai:qwen2.5-coder:7b"}},
		{"Responses models beside Chat Completions", map[string]string{"OPENAI_API_KEY": "sk-1", "OPENAI_MODEL": "gpt-4.1", "OPENAI_RESPONSES_MODEL": "gpt-5-mini, o4-mini,gpt-5-mini"},
			[]string{"openai:gpt-4.1", "openai-responses:gpt-5-mini", "openai-responses:o4-mini"}},
		{"Responses models with the default Chat model", map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_RESPONSES_MODEL": "gpt-5"},
			[]string{"openai:gpt-4o-mini", "openai-responses:gpt-5"}},
		{"Anthropic key", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1"}, []string{"anthropic:claude-sonnet-4-5"}},
		{"Anthropic with thinking", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1", "ANTHROPIC_THINKING": "adaptive"}, []string{"anthropic:claude-sonnet-4-5"}},
		{"both", map[string]string{"OPENAI_API_KEY": "sk-1", "OPENAI_MODEL": "gpt-4o", "ANTHROPIC_API_KEY": "sk-ant-1", "ANTHROPIC_MODEL": "claude-opus-4-1"},
			[]string{"openai:gpt-4o", "anthropic:claude-opus-4-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vendors, err := Vendors(func(k string) string { return tt.env[k] }, VendorOptions{})
			if err != nil {
				t.Fatalf("Vendors: %v", err)
			}
			var got []string
			for _, v := range vendors {
				got = append(got, v.Name)
				if v.Model == nil {
					t.Errorf("%s: no model", v.Name)
				}
				if _, ok := v.Model.(agent.ContextWindow); !ok {
					t.Errorf("%s: no ContextWindow", v.Name)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestVendorsRefuseABadThinkingSetting(t *testing.T) {
	for _, v := range []string{"lots", "512", "-1", "1024.5"} {
		t.Run(v, func(t *testing.T) {
			env := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1", "ANTHROPIC_THINKING": v}
			got, err := Vendors(func(k string) string { return env[k] }, VendorOptions{})
			want := fmt.Sprintf(`ANTHROPIC_THINKING: thinking %q: want off, adaptive, or a budget of at least 1024 tokens`, v)
			if err == nil || err.Error() != want {
				t.Fatalf("error: got %v, want %q", err, want)
			}
			if got != nil {
				t.Errorf("models with the error: %v", got)
			}
		})
	}
}

func TestParseAnthropicThinking(t *testing.T) {
	tests := []struct {
		in   string
		want AnthropicThinking
	}{
		{"", AnthropicThinking{}},
		{" OFF ", AnthropicThinking{}},
		{"adaptive", AnthropicThinking{Adaptive: true}},
		{"1024", AnthropicThinking{Budget: 1024}},
		{"16000", AnthropicThinking{Budget: 16000}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAnthropicThinking(tt.in)
			if err != nil || got != tt.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// fixedModels is a stand-in for the faux Registry.
type fixedModels map[string]agent.Model

func (m fixedModels) Names() []string { return []string{"faux:demo"} }
func (m fixedModels) Model(name string) (agent.Model, error) {
	if mod, ok := m[name]; ok {
		return mod, nil
	}
	return nil, apperr.Errorf(apperr.Invalid, "Unknown model %q.", name)
}

func TestCatalog(t *testing.T) {
	demo := &Faux{Script: &Script{Name: "demo"}}
	gpt := NewOpenAI(OpenAIConfig{Model: "gpt-4o-mini"})
	c := NewCatalog(fixedModels{"faux:demo": demo}, []VendorModel{{Name: "openai:gpt-4o-mini", Model: gpt}})
	if got, want := c.Names(), []string{"faux:demo", "openai:gpt-4o-mini"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names: got %q, want %q", got, want)
	}
	for name, want := range map[string]agent.Model{"faux:demo": demo, "openai:gpt-4o-mini": gpt} {
		if got, err := c.Model(name); err != nil || got != want {
			t.Errorf("Model(%q): got %v, %v; want %v", name, got, err, want)
		}
	}
	_, err := c.Model("openai:gpt-5")
	if got, want := apperr.CodeOf(err), apperr.Invalid; got != want {
		t.Errorf("unknown model: code %q, want %q", got, want)
	}
	if got, want := apperr.MessageOf(err), `Unknown model "openai:gpt-5"; offered: faux:demo, openai:gpt-4o-mini.`; got != want {
		t.Errorf("unknown model: message %q, want %q", got, want)
	}
}
