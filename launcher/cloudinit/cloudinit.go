// Package cloudinit builds cloud-init NoCloud seed images (ISO 9660, volume
// label "cidata") from a VMI's cloudInitNoCloud volume source, as KubeVirt
// does, without shelling out to genisoimage.
package cloudinit

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/kdomanski/iso9660"

	"github.com/kemu-dev/kemu/api/v1alpha1"
)

// VolumeLabel is the NoCloud data source's file-system label.
const VolumeLabel = "cidata"

// ConfigDriveLabel is the OpenStack config drive's file-system label.
const ConfigDriveLabel = "config-2"

// Files of a config drive, under openstack/latest/.
const (
	configDriveDir         = "openstack/latest/"
	ConfigDriveUserData    = configDriveDir + "user_data"
	ConfigDriveMetaData    = configDriveDir + "meta_data.json"
	ConfigDriveNetworkData = configDriveDir + "network_data.json"
)

// ConfigDriveFiles lays d out as an OpenStack config drive, as KubeVirt
// does: meta_data.json carries instance_id and uuid (both instanceID) and
// hostname; d.MetaData (NoCloud's) is not used.
func ConfigDriveFiles(d Data, instanceID, hostname string) (map[string][]byte, error) {
	md, err := json.MarshalIndent(struct {
		InstanceID string `json:"instance_id"`
		UUID       string `json:"uuid"`
		Hostname   string `json:"hostname,omitempty"`
	}{instanceID, instanceID, hostname}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("config drive meta-data: %w", err)
	}
	files := map[string][]byte{ConfigDriveMetaData: md, ConfigDriveUserData: d.UserData}
	if len(d.NetworkData) > 0 {
		files[ConfigDriveNetworkData] = d.NetworkData
	}
	return files, nil
}

// File names in the seed image.
const (
	UserDataFile      = "user-data"
	MetaDataFile      = "meta-data"
	NetworkConfigFile = "network-config"
)

// Secret keys, as KubeVirt reads them: lower case first, then camel case.
var (
	userDataKeys    = []string{"userdata", "userData"}
	networkDataKeys = []string{"networkdata", "networkData"}
)

// Data is what goes into a NoCloud seed.
type Data struct {
	UserData    []byte
	MetaData    []byte
	NetworkData []byte // network-config; omitted from the seed when empty
}

// MetaData renders NoCloud meta-data with the instance ID and hostname.
func MetaData(instanceID, hostname string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "instance-id: %s\n", yamlScalar(instanceID))
	if hostname != "" {
		fmt.Fprintf(&b, "local-hostname: %s\n", yamlScalar(hostname))
	}
	return b.Bytes()
}

var plainScalar = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._/-]*$`)

// yamlScalar leaves names, UIDs and namespace.name values plain and quotes
// anything else (a JSON string is a YAML double-quoted scalar).
func yamlScalar(s string) string {
	if plainScalar.MatchString(s) && !isYAMLKeyword(s) {
		return s
	}
	return strconv.Quote(s)
}

func isYAMLKeyword(s string) bool {
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "null", "y", "n", "~":
		return true
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return true
	}
	return false
}

// NoCloudISO writes a NoCloud seed ISO 9660 image labelled "cidata" with
// user-data, meta-data and (if given) network-config to path, atomically
// (temporary file + rename), mode 0644.
func NoCloudISO(path string, d Data) (err error) {
	if len(d.MetaData) == 0 {
		return errors.New("cloud-init: no meta-data")
	}
	w, err := iso9660.NewWriter()
	if err != nil {
		return fmt.Errorf("cloud-init ISO: %w", err)
	}
	defer w.Cleanup()
	files := []struct {
		name string
		data []byte
	}{{UserDataFile, d.UserData}, {MetaDataFile, d.MetaData}}
	if len(d.NetworkData) > 0 {
		files = append(files, struct {
			name string
			data []byte
		}{NetworkConfigFile, d.NetworkData})
	}
	for _, f := range files {
		if err := w.AddFile(bytes.NewReader(f.data), f.name); err != nil {
			return fmt.Errorf("cloud-init ISO: %s: %w", f.name, err)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("cloud-init ISO: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := w.WriteTo(tmp, VolumeLabel); err != nil {
		return fmt.Errorf("cloud-init ISO: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("cloud-init ISO: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cloud-init ISO: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("cloud-init ISO: %w", err)
	}
	return nil
}

// FieldError is an error about one field of a cloudInitNoCloud source;
// Field is relative to the source ("userDataBase64", "secretRef").
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return "cloudInitNoCloud." + e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Resolve turns a cloudInitNoCloud source into seed data. User data comes
// from userData, userDataBase64 or the secret's "userdata" (or "userData")
// key; network data from networkData or networkDataBase64, else the secret's
// "networkdata" (or "networkData") key if present. A secret named N is read
// from the directory secretsDir/N (a mounted Secret volume: one file per key).
// Errors are *FieldError naming the field (cloudInitNoCloud.<field>: ...).
func Resolve(src *v1alpha1.CloudInitNoCloudSource, secretsDir string, instanceID, hostname string) (Data, error) {
	if src == nil {
		return Data{}, &FieldError{Field: "", Err: errors.New("no source")}
	}
	d := Data{MetaData: MetaData(instanceID, hostname)}
	set := 0
	for _, ok := range []bool{src.UserData != "", src.UserDataBase64 != "", src.SecretRef != nil} {
		if ok {
			set++
		}
	}
	if set > 1 {
		return Data{}, &FieldError{Field: "userData", Err: errors.New("userData, userDataBase64 and secretRef are mutually exclusive")}
	}
	if src.NetworkData != "" && src.NetworkDataBase64 != "" {
		return Data{}, &FieldError{Field: "networkData", Err: errors.New("networkData and networkDataBase64 are mutually exclusive")}
	}
	if set == 0 && src.NetworkData == "" && src.NetworkDataBase64 == "" {
		return Data{}, &FieldError{Field: "userData", Err: errors.New("one of userData, userDataBase64, secretRef, networkData or networkDataBase64 is required")}
	}

	var err error
	switch {
	case src.UserData != "":
		d.UserData = []byte(src.UserData)
	case src.UserDataBase64 != "":
		if d.UserData, err = decodeBase64(src.UserDataBase64); err != nil {
			return Data{}, &FieldError{Field: "userDataBase64", Err: err}
		}
	}
	switch {
	case src.NetworkData != "":
		d.NetworkData = []byte(src.NetworkData)
	case src.NetworkDataBase64 != "":
		if d.NetworkData, err = decodeBase64(src.NetworkDataBase64); err != nil {
			return Data{}, &FieldError{Field: "networkDataBase64", Err: err}
		}
	}
	if src.SecretRef != nil {
		secret := src.SecretRef.Name
		dir, err := secretDir(secretsDir, secret)
		if err != nil {
			return Data{}, &FieldError{Field: "secretRef.name", Err: err}
		}
		ud, found, err := readKey(dir, userDataKeys)
		if err != nil {
			return Data{}, &FieldError{Field: "secretRef", Err: fmt.Errorf("secret %q: %w", secret, err)}
		}
		if !found {
			return Data{}, &FieldError{Field: "secretRef", Err: fmt.Errorf("secret %q has no %s key (looked in %s)",
				secret, strings.Join(userDataKeys, " or "), dir)}
		}
		d.UserData = ud
		if d.NetworkData == nil {
			nd, found, err := readKey(dir, networkDataKeys)
			if err != nil {
				return Data{}, &FieldError{Field: "secretRef", Err: fmt.Errorf("secret %q: %w", secret, err)}
			}
			if found {
				d.NetworkData = nd
			}
		}
	}
	return d, nil
}

// decodeBase64 accepts standard base64, padded or not, ignoring line breaks
// (as base64 -w76 output has).
func decodeBase64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, s)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if b2, err2 := base64.RawStdEncoding.DecodeString(s); err2 == nil {
			return b2, nil
		}
		return nil, fmt.Errorf("invalid base64: %w", err)
	}
	return b, nil
}

func secretDir(secretsDir, name string) (string, error) {
	if name == "" {
		return "", errors.New("empty secret name")
	}
	if name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return "", fmt.Errorf("invalid secret name %q", name)
	}
	if secretsDir == "" {
		return "", fmt.Errorf("secret %q: no secrets directory configured", name)
	}
	dir := filepath.Join(secretsDir, name)
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("secret %q not found (%s does not exist)", name, dir)
		}
		return "", fmt.Errorf("secret %q: %w", name, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("secret %q: %s is not a directory", name, dir)
	}
	return dir, nil
}

// readKey reads the first key of keys present in a secret directory.
func readKey(dir string, keys []string) ([]byte, bool, error) {
	for _, k := range keys {
		b, err := os.ReadFile(filepath.Join(dir, k))
		if err == nil {
			return b, true, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, false, err
		}
	}
	return nil, false, nil
}
