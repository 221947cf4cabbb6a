package storecfg_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storecfg"
)

const secretCanary = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYCANARYKEY"

func TestParseCredentials(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     rpc.Credentials
		bad      string // substring of the error; "" for success
	}{
		{"plain", "access_key = AK\nsecret_key = " + secretCanary + "\n", rpc.Credentials{AccessKey: "AK", SecretKey: secretCanary}, ""},
		{"comments and blanks", "# steward\n\n  access_key=AK  \n\tsecret_key =" + secretCanary, rpc.Credentials{AccessKey: "AK", SecretKey: secretCanary}, ""},
		{"formatted", string(storecfg.FormatCredentials(rpc.Credentials{AccessKey: "AK", SecretKey: secretCanary})), rpc.Credentials{AccessKey: "AK", SecretKey: secretCanary}, ""},
		{"missing secret", "access_key = AK\n", rpc.Credentials{}, "both access_key and secret_key"},
		{"empty value", "access_key = AK\nsecret_key =\n", rpc.Credentials{}, "line 2: secret_key is empty"},
		{"twice", "access_key = AK\naccess_key = " + secretCanary + "\nsecret_key = s\n", rpc.Credentials{}, "line 2: access_key given twice"},
		{"unknown field", "access_key = AK\nsecret = " + secretCanary + "\n", rpc.Credentials{}, "line 2: unknown field"},
		{"no equals", secretCanary + "\n", rpc.Credentials{}, "line 1 is not key = value"},
		{"too long", "access_key = AK\nsecret_key = " + strings.Repeat("x", 5000) + "\n", rpc.Credentials{}, "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := storecfg.ParseCredentials(strings.NewReader(tc.in))
			if tc.bad == "" {
				if err != nil || got != tc.want {
					t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			if !errors.Is(err, storecfg.ErrCredentials) || !strings.Contains(err.Error(), tc.bad) {
				t.Fatalf("error %v; want ErrCredentials with %q", err, tc.bad)
			}
			if strings.Contains(err.Error(), secretCanary) || strings.Contains(err.Error(), "xxxx") {
				t.Fatalf("the error quotes the file's content: %v", err)
			}
		})
	}
}

func TestWithoutEnvKeys(t *testing.T) {
	got := storecfg.WithoutEnvKeys([]string{"PATH=/bin", "STEWARD_S3_ACCESS_KEY=a", "STEWARD_S3_SECRET_KEY=" + secretCanary,
		"STEWARD_S3_ENDPOINT=e", "STEWARD_S3_ACCESS_KEY_X=kept"})
	if strings.Join(got, " ") != "PATH=/bin STEWARD_S3_ENDPOINT=e STEWARD_S3_ACCESS_KEY_X=kept" {
		t.Fatalf("got %v", got)
	}
}

// FuzzParseCredentials: any input either parses into keys that render and parse back the same,
// or fails with a short message that quotes none of it.
func FuzzParseCredentials(f *testing.F) {
	f.Add("access_key = AK\nsecret_key = " + secretCanary + "\n")
	f.Add("# c\n\naccess_key=a\nsecret_key=b")
	f.Add("access_key = AK\naccess_key = " + secretCanary)
	f.Add(secretCanary)
	f.Fuzz(func(t *testing.T, in string) {
		c, err := storecfg.ParseCredentials(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, storecfg.ErrCredentials) || len(err.Error()) > 120 {
				t.Fatalf("error %q", err)
			}
			return
		}
		back, err := storecfg.ParseCredentials(strings.NewReader(string(storecfg.FormatCredentials(c))))
		if err != nil || back != c {
			t.Fatalf("%+v rendered and parsed back as %+v, %v", c, back, err)
		}
	})
}
