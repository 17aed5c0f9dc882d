package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables the CLI reads. Each overrides the config file.
const (
	EnvServer = "KNOTLESS_SERVER" // server URL
	EnvToken  = "KNOTLESS_TOKEN"  // account API token
	EnvRepo   = "KNOTLESS_REPO"   // default for --repo
)

// Config is what `knotless login` saves: the server and the account token.
// It lives in ConfigPath's file, mode 0600.
type Config struct {
	Server string `json:"server"`
	Token  string `json:"token"`
}

// ConfigPath returns the config file's path: override when set (--config),
// else $XDG_CONFIG_HOME/knotless/config.json, else
// $HOME/.config/knotless/config.json. getenv reads the environment.
func ConfigPath(override string, getenv func(string) string) (string, error) {
	if override != "" {
		return override, nil
	}
	if x := getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "knotless", "config.json"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", errors.New("cannot find the config file: neither XDG_CONFIG_HOME nor HOME is set (use --config FILE)")
	}
	return filepath.Join(home, ".config", "knotless", "config.json"), nil
}

// LoadConfig reads the config file at path. A missing file is an empty
// Config, not an error; an unreadable or malformed one is an error.
func LoadConfig(path string) (Config, error) {
	var c Config
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read config %s: %w", path, err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("read config %s: %w (fix or remove it, then run knotless login)", path, err)
	}
	return c, nil
}

// SaveConfig writes c to path with mode 0600 (its directory 0700 when it
// has to be made), replacing the file atomically.
func SaveConfig(path string, c Config) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.json")
	if err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("save config: %w", err)
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("save config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	return nil
}

// resolveConfig loads the config file and applies KNOTLESS_SERVER and
// KNOTLESS_TOKEN over it. It also warns (on warn) when the file can be read
// by others than its owner.
func resolveConfig(path string, getenv func(string) string, warn func(string)) (Config, error) {
	c, err := LoadConfig(path)
	if err != nil {
		return c, err
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		warn(fmt.Sprintf("warning: %s is readable by others (mode %04o) and holds your token: chmod 600 %s", path, fi.Mode().Perm(), path))
	}
	if s := getenv(EnvServer); s != "" {
		c.Server = s
	}
	if t := getenv(EnvToken); t != "" {
		c.Token = t
	}
	c.Server = strings.TrimRight(strings.TrimSpace(c.Server), "/")
	c.Token = strings.TrimSpace(c.Token)
	return c, nil
}
