//! The `#[tool]` attribute: turns a plain sync or async function into a Jianmu tool.
//!
//! ```
//! use jianmu_tool_macros::tool;
//!
//! /// Adds two integers.
//! #[tool]
//! fn add(
//!     /// The left operand.
//!     a: i64,
//!     b: i64,
//! ) -> i64 {
//!     a + b
//! }
//!
//! // The function stays callable; `add_tool()` builds the tool.
//! assert_eq!(add(1, 2), 3);
//! let tool = add_tool();
//! assert_eq!(tool.spec().name, "add");
//! assert_eq!(tool.spec().description, "Adds two integers.");
//! ```
//!
//! Keys of the attribute: `name = "..."` (default: the function's name),
//! `description = "..."` (default: the doc comment; one of the two is required),
//! `parallel_safe = false` (default true), `effects = ["filesystem:write", ...]`.
//! Arguments must be owned types that implement `serde::Deserialize` and
//! `schemars::JsonSchema`; a doc comment on an argument becomes its description in the
//! input schema. The return type must implement `jianmu_tool_core::IntoToolOutput`
//! (strings, numbers, `serde_json::Value`, `Json<T>`, `Structured<T>`,
//! `Result<T, E: Display>`, ...); the output schema is the one it declares (derived
//! from `T` for `Json<T>` and `Structured<T>`).

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprLit, FnArg, ItemFn, Lit, LitStr, Meta, Pat, Type};

/// Makes a `FunctionTool` from a function; see the crate documentation.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    match expand(attr.into(), item.into()) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

#[derive(Default)]
struct Options {
    name: Option<LitStr>,
    description: Option<LitStr>,
    parallel_safe: Option<syn::LitBool>,
    effects: Vec<LitStr>,
}

fn parse_options(attr: TokenStream2) -> syn::Result<Options> {
    let mut options = Options::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") {
            options.name = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("description") {
            options.description = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("parallel_safe") {
            options.parallel_safe = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("effects") {
            let value = meta.value()?;
            let content;
            syn::bracketed!(content in value);
            let list = content.parse_terminated(|p| p.parse::<LitStr>(), syn::Token![,])?;
            options.effects = list.into_iter().collect();
        } else {
            return Err(meta.error(
                "unknown #[tool] key; expected `name`, `description`, `parallel_safe` or `effects`",
            ));
        }
        Ok(())
    });
    parser.parse2(attr)?;
    Ok(options)
}

fn doc_text(attrs: &[Attribute]) -> Option<String> {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) => Some(s.value().trim().to_owned()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let text = lines.join("\n").trim().to_owned();
    (!text.is_empty()).then_some(text)
}

struct Arg {
    ident: syn::Ident,
    ty: Type,
    docs: Vec<Attribute>,
}

fn collect_args(func: &mut ItemFn) -> syn::Result<Vec<Arg>> {
    let mut args = Vec::new();
    for input in &mut func.sig.inputs {
        match input {
            FnArg::Receiver(r) => {
                return Err(syn::Error::new(
                    r.span(),
                    "#[tool] cannot be used on methods; write a free function",
                ));
            }
            FnArg::Typed(pt) => {
                let Pat::Ident(pi) = &*pt.pat else {
                    return Err(syn::Error::new(
                        pt.pat.span(),
                        "#[tool] arguments need plain names: the name is the JSON key",
                    ));
                };
                if let Type::Reference(r) = &*pt.ty {
                    return Err(syn::Error::new(
                        r.span(),
                        "#[tool] arguments must be owned types (for example String, not &str)",
                    ));
                }
                let (docs, rest): (Vec<_>, Vec<_>) =
                    pt.attrs.drain(..).partition(|a| a.path().is_ident("doc"));
                pt.attrs = rest;
                args.push(Arg {
                    ident: pi.ident.clone(),
                    ty: (*pt.ty).clone(),
                    docs,
                });
            }
        }
    }
    Ok(args)
}

fn expand(attr: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    let options = parse_options(attr)?;
    let mut func: ItemFn = syn::parse2(item)
        .map_err(|e| syn::Error::new(e.span(), "#[tool] goes on a function (fn or async fn)"))?;
    if !func.sig.generics.params.is_empty() || func.sig.generics.where_clause.is_some() {
        return Err(syn::Error::new(
            func.sig.generics.span(),
            "#[tool] functions cannot be generic: the input schema needs concrete types",
        ));
    }
    if let Some(v) = &func.sig.variadic {
        return Err(syn::Error::new(
            v.span(),
            "#[tool] functions cannot be variadic",
        ));
    }
    let args = collect_args(&mut func)?;

    let fn_ident = &func.sig.ident;
    let vis = &func.vis;
    let name = options
        .name
        .clone()
        .unwrap_or_else(|| LitStr::new(&fn_ident.to_string(), fn_ident.span()));
    let description = match (&options.description, doc_text(&func.attrs)) {
        (Some(d), _) => d.clone(),
        (None, Some(doc)) => LitStr::new(&doc, Span::call_site()),
        (None, None) => {
            return Err(syn::Error::new(
                fn_ident.span(),
                "#[tool] needs a description for the model: add a doc comment or `description = \"...\"`",
            ));
        }
    };
    let parallel_safe = options
        .parallel_safe
        .as_ref()
        .is_none_or(syn::LitBool::value);
    let effects = &options.effects;
    let builder = format_ident!("{}_tool", fn_ident);

    let core = quote!(::jianmu_tool_core);
    let field_defs = args.iter().map(|a| {
        let (ident, ty, docs) = (&a.ident, &a.ty, &a.docs);
        quote! { #(#docs)* #ident: #ty }
    });
    let idents: Vec<_> = args.iter().map(|a| &a.ident).collect();
    let call = if func.sig.asyncness.is_some() {
        quote! { #fn_ident(#(#idents),*).await }
    } else {
        quote! { #fn_ident(#(#idents),*) }
    };
    let decode = quote! {
        let __Args { #(#idents),* } = #core::__private::serde_json::from_value::<__Args>(__args)
            .map_err(|e| #core::ToolError::InvalidArguments {
                tool: #name.to_owned(),
                violations: ::std::vec![#core::Violation { pointer: ::std::string::String::new(), message: e.to_string() }],
            })?;
    };
    let body = if func.sig.asyncness.is_some() {
        quote! {
            #core::FunctionTool::new(__spec, |__args: #core::__private::serde_json::Value| async move {
                #decode
                #core::IntoToolOutput::into_tool_output(#call)
            })
        }
    } else {
        quote! {
            #core::FunctionTool::from_sync(__spec, |__args: #core::__private::serde_json::Value| {
                #decode
                #core::IntoToolOutput::into_tool_output(#call)
            })
        }
    };
    // An `impl Trait` return type cannot be named: such a tool answers with text.
    let output_schema = match &func.sig.output {
        syn::ReturnType::Default => quote!(.with_output_schema(#core::output_schema_of::<()>())),
        syn::ReturnType::Type(_, ty) if matches!(**ty, Type::ImplTrait(_)) => quote!(),
        syn::ReturnType::Type(_, ty) => {
            quote!(.with_output_schema(#core::output_schema_of::<#ty>()))
        }
    };
    let doc = format!("Builds the `{}` tool from [`{fn_ident}`].", name.value());

    Ok(quote! {
        #func

        #[doc = #doc]
        #vis fn #builder() -> #core::FunctionTool {
            #[derive(#core::__private::serde::Deserialize, #core::__private::schemars::JsonSchema)]
            #[serde(crate = "::jianmu_tool_core::__private::serde", deny_unknown_fields)]
            #[schemars(crate = "::jianmu_tool_core::__private::schemars")]
            #[allow(non_camel_case_types)]
            struct __Args { #(#field_defs),* }

            let __effects: &[&str] = &[#(#effects),*];
            let __spec = #core::ToolSpec::new(#name, #description)
                .with_input_schema(#core::schema_for::<__Args>())
                #output_schema
                .with_parallel_safe(#parallel_safe)
                .with_effect_tags(__effects.iter().copied());
            #body
        }
    })
}
