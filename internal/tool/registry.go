package tool

import (
	"fmt"
	"sort"
	"sync"
)

// Registry holds the registered tools by name. It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]*Tool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{tools: map[string]*Tool{}} }

// Register compiles t's schemas and adds it. It refuses, with the reason, a name that breaks the
// MCP rule, a duplicate name, an unknown exposure, a missing execute function, and a schema that
// is not a JSON Schema 2020-12 object schema.
func (r *Registry) Register(t *Tool) error {
	if err := t.compile(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[t.Name]; dup {
		return fmt.Errorf("tool %s: already registered", t.Name)
	}
	r.tools[t.Name] = t
	return nil
}

// Lookup returns the tool named name.
func (r *Registry) Lookup(name string) (*Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tools[name]
	return t, ok
}

// All returns every registered tool, sorted by name.
func (r *Registry) All() []*Tool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Tool, 0, len(r.tools))
	for _, t := range r.tools {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// DefaultActive returns the names of the tools a new session starts with (SPEC §1: direct and
// model-only tools unless defaultActive is false), sorted.
func (r *Registry) DefaultActive() []string {
	var names []string
	for _, t := range r.All() {
		if t.ActiveByDefault() {
			names = append(names, t.Name)
		}
	}
	return names
}

// Declared reports whether the model is told of t, given whether t is in the session's active
// set (SPEC §1 exposure table: every exposure but hidden is declared exactly while active).
func Declared(t *Tool, active bool) bool { return active && t.Exposure != Hidden }

// CallableByModel reports whether a model-issued call of t may run: only declared tools.
func CallableByModel(t *Tool, active bool) bool { return Declared(t, active) }

// CallableNested reports whether ExecuteTool may run t (SPEC §1 exposure table): direct while
// active; codemode and deferred always; model-only and hidden never.
func CallableNested(t *Tool, active bool) bool {
	switch t.Exposure {
	case Direct:
		return active
	case Codemode, Deferred:
		return true
	}
	return false
}

// Activatable reports whether SetActiveTools may put t in the active set (hidden tools never).
func Activatable(t *Tool) bool { return t.Exposure != Hidden }
