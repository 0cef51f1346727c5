package models

import (
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
)

//go:embed scripts/*.json
var embedded embed.FS

// Registry offers models by name: "faux:<script>" for the embedded scripts and the scripts
// folder. It implements agent.Models. The folder is read again on every lookup, so a script
// dropped there appears without a restart.
type Registry struct {
	dir        string
	chunkDelay time.Duration
	log        *slog.Logger

	mu      sync.Mutex
	builtin map[string]*Script
	bad     map[string]string // file → last error logged, so each error is logged once
}

// NewRegistry loads the embedded scripts and returns a registry that also reads *.json scripts
// from dir ("" for none). chunkDelay is the faux model's pause between text chunks.
func NewRegistry(dir string, chunkDelay time.Duration, log *slog.Logger) (*Registry, error) {
	r := &Registry{dir: dir, chunkDelay: chunkDelay, log: log, builtin: map[string]*Script{}, bad: map[string]string{}}
	entries, err := fs.Glob(embedded, "scripts/*.json")
	if err != nil {
		return nil, err
	}
	for _, name := range entries {
		data, err := embedded.ReadFile(name)
		if err != nil {
			return nil, err
		}
		sc, err := ParseScript(name, data)
		if err != nil {
			return nil, err
		}
		sc.Name = strings.TrimSuffix(filepath.Base(name), ".json")
		r.builtin[sc.Name] = sc
	}
	if dir != "" {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return nil, errors.New("scripts folder " + dir + " is not an existing folder")
		}
	}
	return r, nil
}

// LoadDir parses every *.json script in dir. Scripts that fail are refused (not returned) and
// reported as *ScriptError values naming file, position and reason.
func LoadDir(dir string) (map[string]*Script, []error) {
	scripts := map[string]*Script{}
	if dir == "" {
		return scripts, nil
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return scripts, []error{err}
	}
	var errs []error
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sc, err := ParseScript(f, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sc.Name = strings.TrimSuffix(filepath.Base(f), ".json")
		scripts[sc.Name] = sc
	}
	return scripts, errs
}

// scripts returns the embedded scripts overlaid with the folder's, logging each refused script
// once.
func (r *Registry) scripts() map[string]*Script {
	folder, errs := LoadDir(r.dir)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range errs {
		var se *ScriptError
		file := err.Error()
		if errors.As(err, &se) {
			file = se.File
		}
		if r.bad[file] != err.Error() {
			r.bad[file] = err.Error()
			r.log.Error("faux script refused", "err", err.Error())
		}
	}
	all := map[string]*Script{}
	for k, v := range r.builtin {
		all[k] = v
	}
	for k, v := range folder {
		all[k] = v
	}
	return all
}

// Names lists the offered models: "faux:demo" first, then the other scripts by name.
func (r *Registry) Names() []string {
	var names []string
	for name := range r.scripts() {
		if name != "demo" {
			names = append(names, "faux:"+name)
		}
	}
	sort.Strings(names)
	return append([]string{"faux:demo"}, names...)
}

// Model returns the model named name, or apperr.Invalid naming what is offered.
func (r *Registry) Model(name string) (agent.Model, error) {
	if script, ok := strings.CutPrefix(name, "faux:"); ok {
		if sc := r.scripts()[script]; sc != nil {
			return &Faux{Script: sc, ChunkDelay: r.chunkDelay}, nil
		}
	}
	return nil, apperr.Errorf(apperr.Invalid, "Unknown model %q; offered: %s.", name, strings.Join(r.Names(), ", "))
}
