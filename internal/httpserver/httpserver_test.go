package httpserver

import (
	"net/http"
	"reflect"
	"testing"
)

// TestCopyEveryField sets every exported field of an http.Server to a
// value other than its zero and checks that Copy carries each but Addr:
// a field a new Go release adds fails here until Copy carries it (or the
// test says why not).
func TestCopyEveryField(t *testing.T) {
	var s http.Server
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		f.Set(nonZero(t, sf.Name, f.Type()))
	}
	c := reflect.ValueOf(Copy(&s)).Elem()
	for i := range v.NumField() {
		sf := v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		got, want := c.Field(i), v.Field(i)
		if sf.Name == "Addr" {
			if !got.IsZero() {
				t.Errorf("Addr copied: %v", got)
			}
			continue
		}
		if !same(got, want) {
			t.Errorf("field %s not copied: got %v, want %v", sf.Name, got, want)
		}
	}
}

// nonZero returns a value of type typ that is not its zero value.
func nonZero(t *testing.T, name string, typ reflect.Type) reflect.Value {
	switch typ.Kind() {
	case reflect.String:
		return reflect.ValueOf("x").Convert(typ)
	case reflect.Bool:
		return reflect.ValueOf(true).Convert(typ)
	case reflect.Int, reflect.Int64:
		return reflect.ValueOf(int64(7)).Convert(typ)
	case reflect.Pointer:
		return reflect.New(typ.Elem())
	case reflect.Map:
		return reflect.MakeMap(typ)
	case reflect.Func:
		return reflect.MakeFunc(typ, func([]reflect.Value) []reflect.Value { return nil })
	case reflect.Interface:
		if typ == reflect.TypeOf((*http.Handler)(nil)).Elem() {
			return reflect.ValueOf(http.NewServeMux())
		}
	}
	t.Fatalf("field %s: no test value for a %v", name, typ)
	return reflect.Value{}
}

// same reports whether got and want are the same value: the same pointer,
// map or func, or equal.
func same(got, want reflect.Value) bool {
	switch got.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func:
		return got.Pointer() == want.Pointer()
	}
	return reflect.DeepEqual(got.Interface(), want.Interface())
}
